#!/usr/bin/env python3
"""The quickly deployable plugin samples (TensorRT's qdp_runner.py) on kiln:
CPU impls in numpy, and with --device cuda the CUDA impls of qdp_cuda.py
(Triton kernels; circ_pad --multi_tactic times torch against Triton):

    python3 qdp_runner.py add [--autotune] [--aot] [-v]
    python3 qdp_runner.py inplace_add [--autotune] [-v]
    python3 qdp_runner.py non_zero [-v]
    python3 qdp_runner.py circ_pad [--multi_tactic] [--aot] [--mode onnx|inetdef]
                                   [--save_engine | --load_engine] [--artifacts_dir DIR] [-v]

    any of them with [--device cpu|cuda]

Each builds an engine with its plugin (from the network API or an ONNX
model), runs it on random inputs, checks the outputs against numpy and
prints PASS or FAIL (exit 1).  It prints where each layer runs (name, op,
device, JIT impl or AOT kernel, tactic) and fails if a plugin layer runs on
another device than --device asks.  With -v the build log shows every impl call
made while autotuning.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Tuple

import numpy as np
import numpy.typing as npt

import kiln
import kiln.plugin as kp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_writer  # noqa: E402
import placement  # noqa: E402

VERBOSE = False


def log_call(name, **what):
    if VERBOSE:
        print(f"  impl {name}: " + ", ".join(f"{k}={v}" for k, v in what.items()))


# ------------------------------------------------------------------ add: Y = X + 1

@kp.register("sample::elemwise_add_plugin")
def add_plugin_desc(inp0: kp.TensorDesc, block_size: int) -> kp.TensorDesc:
    return inp0.like()


@kp.impl("sample::elemwise_add_plugin")
def add_plugin_impl(inp0: kp.Tensor, block_size: int, outputs: Tuple[kp.Tensor], stream: int) -> None:
    log_call("elemwise_add_plugin", dtype=inp0.dtype.name, shape=inp0.shape, block_size=block_size)
    np.add(np.asarray(inp0), 1, out=np.asarray(outputs[0]))


ADD_AOT_SRC = """
#include <kiln/plugin.h>
/* y = x + 1 over `extent` blocks of block_size elements (the last one short). */
void add_one(const kiln_aot_args *a, int ith, int nth) {
    const float *x = a->in[0];
    float *y = a->out[0];
    int64_t n = a->i64[0], bs = a->i64[1], lo, hi;
    kiln_split_range(a->extent, ith, nth, &lo, &hi);
    for (int64_t b = lo; b < hi; b++)
        for (int64_t i = b * bs; i < (b + 1) * bs && i < n; i++) y[i] = x[i] + 1.0f;
}
"""


@kp.aot_impl("sample::elemwise_add_plugin", signature="i64,i64")
def add_plugin_aot_impl(inp0: kp.TensorDesc, block_size: int, outputs: Tuple[kp.TensorDesc], tactic: int):
    n = inp0.shape_expr.numel()
    launch = kp.KernelLaunchParams()
    launch.grid_x = kp.cdiv(n, block_size)
    launch.block_x = block_size
    args = kp.SymIntExprs(2)
    args[0] = kp.SymInt64(n)
    args[1] = kp.SymInt64(block_size)
    return "add_one", ADD_AOT_SRC, launch, args


AUTOTUNE = {"on": False}


def add_autotune(inp0: kp.TensorDesc, block_size: int, outputs: Tuple[kp.TensorDesc]):
    return [kp.AutoTuneCombination("FP32|FP16, FP32|FP16")]


# ------------------------------------------------------------------ inplace_add: X += delta

@kp.register("sample::elemwise_add_plugin_")
def add_plugin_desc_(inp0: kp.TensorDesc, delta: int) -> kp.TensorDesc:
    return inp0.aliased()


@kp.impl("sample::elemwise_add_plugin_")
def add_plugin_impl_(inp0: kp.Tensor, delta: int, outputs: Tuple[kp.Tensor], stream: int) -> None:
    log_call("elemwise_add_plugin_", dtype=inp0.dtype.name, shape=inp0.shape, delta=delta,
             in_place=inp0.data_ptr == outputs[0].data_ptr)
    y = np.asarray(outputs[0])
    if inp0.data_ptr != outputs[0].data_ptr:  # kiln times candidates on separate buffers
        y[...] = np.asarray(inp0)
    y += delta


def inplace_autotune(inp0: kp.TensorDesc, delta: int, outputs: Tuple[kp.TensorDesc]):
    return [kp.AutoTuneCombination("FP32|FP16, FP32|FP16")]


# ------------------------------------------------------------------ non_zero: indices of non-zero elements

@kp.register("sample::non_zero_plugin")
def non_zero_plugin_reg(inp0: kp.TensorDesc) -> Tuple[kp.TensorDesc, kp.TensorDesc]:
    upper_bound = inp0.shape_expr[0] * inp0.shape_expr[1]
    st = kp.size_tensor(upper_bound // 2, upper_bound)
    return kp.from_shape_expr((st.expr(), 2), dtype=kiln.int32), st


@kp.impl("sample::non_zero_plugin")
def non_zero_plugin_impl(inp0: kp.Tensor, outputs: Tuple[kp.Tensor], stream: int) -> None:
    idx = np.argwhere(np.asarray(inp0) != 0).astype(np.int32)
    log_call("non_zero_plugin", shape=inp0.shape, nonzero=len(idx), room=outputs[0].shape)
    np.asarray(outputs[0])[: len(idx)] = idx
    np.asarray(outputs[1])[...] = len(idx)


# ------------------------------------------------------------------ circ_pad: torch CircularPad

@kp.register("sample::circ_pad_plugin")
def circ_pad_plugin_desc(inp0: kp.TensorDesc, pads: npt.NDArray[np.int32]) -> kp.TensorDesc:
    ndim = inp0.ndim
    out_desc = inp0.like()
    for i in range(np.size(pads) // 2):
        out_desc.shape_expr[ndim - i - 1] += int(pads[i * 2] + pads[i * 2 + 1])
    return out_desc


def circ_pad_ref(x: np.ndarray, pads: np.ndarray) -> np.ndarray:
    width = [(0, 0)] * x.ndim
    for i in range(len(pads) // 2):
        width[x.ndim - i - 1] = (int(pads[2 * i]), int(pads[2 * i + 1]))
    return np.pad(x, width, mode="wrap")


@kp.impl("sample::circ_pad_plugin")
def circ_pad_plugin_impl(inp0: kp.Tensor, pads: npt.NDArray[np.int32], outputs: Tuple[kp.Tensor], stream: int,
                         tactic: int) -> None:
    log_call("circ_pad_plugin", dtype=inp0.dtype.name, shape=inp0.shape, tactic=tactic)
    x, y = np.asarray(inp0), np.asarray(outputs[0])
    if tactic == 2:  # by index arithmetic instead of np.pad
        idx = np.ix_(*[(np.arange(y.shape[d]) - (y.shape[d] - x.shape[d] and _before(pads, x.ndim, d))) % x.shape[d]
                       for d in range(x.ndim)])
        y[...] = x[idx]
    else:
        y[...] = circ_pad_ref(x, pads)


def _before(pads, ndim, d):
    i = ndim - 1 - d
    return int(pads[2 * i]) if 2 * i < len(pads) else 0


def circ_pad_autotune(inp0: kp.TensorDesc, pads: npt.NDArray[np.int32], outputs: Tuple[kp.TensorDesc]):
    return [kp.AutoTuneCombination("FP32|FP16, FP32|FP16", "LINEAR", [1, 2])]


CIRC_PAD_AOT_SRC = """
#include <string.h>
#include <kiln/plugin.h>
/* One output row (last dim) per work item; rank <= 4 seen as 4-D. */
void circ_pad_rows(const kiln_aot_args *a, int ith, int nth) {
    const int64_t es = a->i64[0], *in = a->i64 + 1, *bf = a->i64 + 5, *od = a->i64 + 9;
    const char *x = a->in[0];
    char *y = a->out[0];
    int64_t L = in[3], left = bf[3], right = od[3] - L - left, lo, hi;
    kiln_split_range(a->extent, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t rem = r, src = 0, stride = 1;
        for (int d = 2; d >= 0; d--) {
            int64_t o = rem % od[d], i;
            rem /= od[d];
            i = ((o - bf[d]) % in[d] + in[d]) % in[d];
            src += i * stride;
            stride *= in[d];
        }
        const char *p = x + src * L * es;
        char *q = y + r * od[3] * es;
        memcpy(q, p + (L - left) * es, (size_t)(left * es));
        memcpy(q + left * es, p, (size_t)(L * es));
        memcpy(q + (left + L) * es, p, (size_t)(right * es));
    }
}
"""


@kp.aot_impl("sample::circ_pad_plugin", signature=",".join(["i64"] * 13))
def circ_pad_plugin_aot_impl(inp0: kp.TensorDesc, pads: npt.NDArray[np.int32], outputs: Tuple[kp.TensorDesc],
                             tactic: int):
    if inp0.ndim > 4:
        raise ValueError(f"circ_pad AOT kernel handles rank <= 4, got {inp0.ndim}")
    out = outputs[0]
    lead = 4 - inp0.ndim
    ins = [1] * lead + list(inp0.shape_expr)
    outs = [1] * lead + list(out.shape_expr)
    before = [0] * 4
    for d in range(inp0.ndim):
        before[lead + d] = _before(pads, inp0.ndim, d)
    args = kp.SymIntExprs.from_tuple([kp.SymInt64(inp0.dtype.itemsize)] + [kp.SymInt64(x) for x in ins + before + outs])
    launch = kp.KernelLaunchParams()
    launch.grid_x = kp.ShapeExpr.of(outs[0]) * outs[1] * outs[2]
    return "circ_pad_rows", CIRC_PAD_AOT_SRC, launch, args


# ------------------------------------------------------------------ runner

SAMPLES = {
    # name: (op, input shape, attrs, reference)
    "add": ("elemwise_add_plugin", (10, 3), {"block_size": 256}, lambda x, a: x + 1),
    "inplace_add": ("elemwise_add_plugin_", (10, 3), {"delta": 2}, lambda x, a: x + 2 + 2),
    "non_zero": ("non_zero_plugin", (8, 5), {}, lambda x, a: np.argwhere(x != 0).astype(np.int32)),
    "circ_pad": ("circ_pad_plugin", (10, 3, 32, 32), {"pads": np.array([1, 1, 1, 1], np.int32)},
                 lambda x, a: circ_pad_ref(x, a["pads"])),
}


def make_network(builder, sample, args):
    op, shape, attrs, _ = SAMPLES[sample]
    chain = 2 if sample in ("inplace_add", "circ_pad") and args.mode == "inetdef" or sample == "inplace_add" else 1
    if args.mode == "onnx":
        names = ["X"] + [f"T{i}" for i in range(1, chain)] + ["Y"]
        nodes = [(op, "sample", [names[i]], [names[i + 1]] + (["N"] if sample == "non_zero" else []),
                  {**attrs, **({"aot": int(args.aot)} if args.sample in ("add", "circ_pad") else {})})
                 for i in range(chain)]
        outs = [("Y", 6 if sample == "non_zero" else 1, ["n", 2] if sample == "non_zero" else
                 list(_out_shape(sample, shape, chain)))]
        blob = onnx_writer.model(nodes, [("X", 1, list(shape))], outs, {"": 17, "sample": 1})
        net = builder.create_network()
        parser = kiln.OnnxParser(net, builder.logger)
        if not parser.parse(blob):
            raise SystemExit("ONNX parse failed:\n" + "\n".join(parser.errors))
        return net, chain
    net = builder.create_network()
    t = net.add_input("X", kiln.float32, shape)
    for _ in range(chain):
        layer = net.add_plugin(getattr(kp.op.sample, op)(t, **attrs),
                               aot=args.aot if args.sample in ("add", "circ_pad") else None)
        t = layer.get_output(0)
    net.mark_output(t)
    return net, chain


def _out_shape(sample, shape, chain):
    if sample != "circ_pad":
        return shape
    return shape[:-2] + tuple(s + 2 * chain for s in shape[-2:])


def main(argv=None) -> int:
    global VERBOSE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sample", choices=sorted(SAMPLES))
    ap.add_argument("--autotune", action="store_true", help="add, inplace_add: time FP32|FP16 combinations")
    ap.add_argument("--multi_tactic", action="store_true", help="circ_pad: time two tactics")
    ap.add_argument("--aot", action="store_true", help="use the aot_impl (C source compiled into the engine)")
    ap.add_argument("--mode", choices=["onnx", "inetdef"], default="inetdef")
    ap.add_argument("--save_engine", action="store_true")
    ap.add_argument("--load_engine", action="store_true")
    ap.add_argument("--artifacts_dir", default=".")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: build for the GPU with the Triton impls of qdp_cuda.py")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    VERBOSE = args.verbose
    if args.autotune and args.sample not in ("add", "inplace_add"):
        ap.error("--autotune applies to add and inplace_add")
    if args.multi_tactic and args.sample != "circ_pad":
        ap.error("--multi_tactic applies to circ_pad")
    if args.aot and args.sample not in ("add", "circ_pad"):
        ap.error("--aot applies to add and circ_pad")
    if args.device == "cuda":
        import qdp_cuda  # noqa: F401  (registers the CUDA impls and AOT kernels)
    if args.autotune:
        kp.autotune("sample::" + SAMPLES[args.sample][0])(
            add_autotune if args.sample == "add" else inplace_autotune)
    if args.multi_tactic:
        kp.autotune("sample::circ_pad_plugin")(circ_pad_autotune)

    logger = kiln.Logger(kiln.Logger.VERBOSE if args.verbose else kiln.Logger.WARNING)
    path = os.path.join(args.artifacts_dir, f"{args.sample}{'_aot' if args.aot else ''}.kiln")
    runtime = kiln.Runtime(logger)
    op, shape, attrs, ref = SAMPLES[args.sample]
    chain = 2 if args.sample == "inplace_add" or (args.sample == "circ_pad" and args.mode == "inetdef") else 1
    if args.load_engine:
        engine = runtime.load_engine(path)
        print(f"loaded {path}")
    else:
        builder = kiln.Builder(logger)
        net, chain = make_network(builder, args.sample, args)
        config = builder.create_builder_config()
        config.device = args.device
        if args.autotune:
            config.set_flag(kiln.BuilderFlag.FP16)
        if args.verbose:
            print("build: impl calls while timing:")
        engine = builder.build_engine(net, config)
        s = builder.last_stats
        print(f"built: {s['layers']} layers, {s['candidates']} candidates, {s['timed']} timed, "
              f"{s['cache_dedup']} deduplicated, {s['build_ms']:.1f} ms")
        if args.save_engine:
            os.makedirs(args.artifacts_dir, exist_ok=True)
            engine.save(path)
            print(f"saved {path}")

    misplaced = placement.report(engine, args.device)
    if misplaced:
        print(f"FAIL: --device {args.device}, but plugin layer(s) {', '.join(misplaced)} ran elsewhere")
        return 1
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    if args.sample == "non_zero":
        x *= rng.random(shape) < 0.5
    out = engine.create_execution_context().execute({engine.inputs[0]: x})
    y = out[engine.outputs[0]]
    want = x
    for _ in range(chain):
        want = ref(want, attrs)
    if args.sample == "inplace_add":
        want = x + attrs["delta"] * chain
    fp16 = args.autotune  # the only mode that lets kiln pick FP16
    tol = 1e-2 if fp16 else 1e-6
    ok = y.shape == want.shape and np.allclose(y, want, rtol=tol, atol=tol)
    print(f"seed {seed}: output {engine.outputs[0]} {y.shape} {'matches' if ok else 'DIFFERS from'} numpy")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
