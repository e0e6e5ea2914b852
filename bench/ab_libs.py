#!/usr/bin/env python3
"""A/B of two libkiln builds on a shared machine: both in one process.

    python3 bench/ab_libs.py LIB_A ENGINE_A LIB_B ENGINE_B [--threads N] [--threads-b N] [--iterations N]
                             [--input NAME=SHAPE]... [--per-layer] [--gap-ms MS]

LIB_A and LIB_B are two builds of libkiln.so (say main's and a branch's),
each loaded with RTLD_LOCAL beside the other; ENGINE_A and ENGINE_B are the
engines each runs (the same file measures only the code paths; each build's
own engine also its tactic choices).  Inferences alternate A, B, B, A, ...
so a neighbour's burst of load hits both alike, and the figures are minima:
the whole run's min and median, and the sum over layers of each layer's
minimum (the context profiler, kiln_context_profile), the steadiest figure
when other work shares the cores.  Inputs: seeded random float32, --input
NAME=SHAPE (repeatable; default input=1x3x224x224, the torchvision models
of compare.py); outputs: --output NAME=SHAPE (default logits=1x1000), bound
to NaN-filled buffers and compared between A and B (largest difference over
the largest magnitude).  --per-layer prints each layer's minimum for A and
B and the difference.  --threads-b runs B at another thread count (the
same library and a 1- and a 2-thread engine: each layer's scaling and the
time it loses to perfect scaling, in one process).
"""
import argparse
import ctypes as C
import platform
import time

import numpy as np


class Kiln:
    def __init__(self, lib, engine, threads, inputs):
        self.L = L = C.CDLL(lib, mode=C.RTLD_LOCAL)
        L.kiln_errmsg.restype = C.c_char_p
        self.e, self.ctx = C.c_void_p(), C.c_void_p()
        if L.kiln_engine_load(engine.encode(), C.byref(self.e)):
            raise SystemExit("%s: %s" % (engine, L.kiln_errmsg().decode()))
        if L.kiln_context_create(self.e, threads, C.byref(self.ctx)):
            raise SystemExit("%s: %s" % (engine, L.kiln_errmsg().decode()))
        self.bufs = {}
        for name, shape in inputs.items():
            x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
            self.bind(name, x)
        L.kiln_context_set_profiling(self.ctx, 1)

    def bind(self, name, arr):
        self.bufs[name] = arr
        if self.L.kiln_context_bind(self.ctx, name.encode(), arr.ctypes.data_as(C.c_void_p), C.c_size_t(arr.nbytes)):
            raise SystemExit("bind %s: %s" % (name, self.L.kiln_errmsg().decode()))

    def run(self):
        if self.L.kiln_context_run(self.ctx):
            raise SystemExit("run: %s" % self.L.kiln_errmsg().decode())

    def layers(self):
        out, i = [], 0
        while True:
            nm, ms = C.c_char_p(), C.c_double()
            if self.L.kiln_context_profile(self.ctx, i, C.byref(nm), C.byref(ms)):
                return out
            out.append((nm.value.decode(), ms.value))
            i += 1


def cpu_model():
    """The CPU's model name (/proc/cpuinfo), for the lines under a table."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def shape_of(spec):
    name, dims = spec.split("=")
    return name, tuple(int(d) for d in dims.split("x"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib_a"), ap.add_argument("engine_a"), ap.add_argument("lib_b"), ap.add_argument("engine_b")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--threads-b", type=int, default=0,
                    help="B's threads when they differ from A's (say A at 1, B at 2: per layer, the scaling and the "
                         "time lost to perfect scaling, B - A * threads / threads-b)")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--input", action="append", default=[], help="NAME=1x3x224x224 (float32)")
    ap.add_argument("--output", action="append", default=[], help="NAME=1x1000 (float32), compared A vs B")
    ap.add_argument("--per-layer", action="store_true")
    ap.add_argument("--gap-ms", type=float, default=0.0,
                    help="sleep between inferences: the other build's pool workers, which spin for 0.2 ms after "
                         "a task, are then asleep and leave the cores to this one (at --threads 2 and more)")
    a = ap.parse_args()
    inputs = dict(shape_of(s) for s in a.input) or {"input": (1, 3, 224, 224)}
    outputs = dict(shape_of(s) for s in a.output) or {"logits": (1, 1000)}
    ks = [Kiln(a.lib_a, a.engine_a, a.threads, inputs), Kiln(a.lib_b, a.engine_b, a.threads_b or a.threads, inputs)]
    for k in ks:
        for name, shape in outputs.items():
            k.bind(name, np.full(shape, np.nan, np.float32))
    lat, mins, order = [[], []], [{}, {}], []
    for i in range(a.iterations + 2):
        for s in ((0, 1) if i % 2 == 0 else (1, 0)):
            if a.gap_ms:
                time.sleep(a.gap_ms / 1e3)
            t = time.perf_counter()
            ks[s].run()
            t = time.perf_counter() - t
            if i < 2:
                continue  # warm-up
            lat[s].append(t * 1e3)
            for n, ms in ks[s].layers():
                if s == 0 and n not in mins[0]:
                    order.append(n)
                mins[s][n] = min(mins[s].get(n, 1e30), ms)
    scale = a.threads / a.threads_b if a.threads_b and a.threads_b != a.threads else 0
    if a.per_layer:
        for n in order:
            b = mins[1].get(n)
            print("%-48s %9.3f %9.3f %+8.3f" % (n, mins[0][n], b if b is not None else float("nan"),
                                                 (b - mins[0][n]) if b is not None else float("nan")) +
                  ("  scaling %5.2fx lost %+7.3f" % (mins[0][n] / b, b - mins[0][n] * scale) if scale and b else ""))
    for s in (0, 1):
        v = sorted(lat[s])
        print("%s: run min %.3f ms, median %.3f ms; sum of per-layer minima %.3f ms" %
              ("AB"[s], v[0], v[len(v) // 2], sum(mins[s].values())))
    for name in outputs:
        ya, yb = ks[0].bufs[name], ks[1].bufs[name]
        big = float(np.abs(ya).max()) or 1.0
        print("output %s: max |A - B| / max |A| = %.2e" % (name, float(np.abs(ya - yb).max()) / big))


if __name__ == "__main__":
    main()
