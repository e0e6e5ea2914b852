#!/usr/bin/env python3
"""Per block against ONNX Runtime, in one process.

    python3 bench/ort_blocks.py LIB ENGINE MODEL.onnx [--threads N] [--iterations N] [--block-re RE] [--gap-ms MS]
                                [--ort-spin | --ort-no-spin]

Runs kiln (LIB, ENGINE, through ab_libs.py's Kiln) and ORT (MODEL.onnx, as
compare.py configures it, with enable_profiling) alternately, so the VM's
drift hits both alike.  Per node / layer the minimum over the runs, summed
per block: the first match of --block-re (default `(features\\.\\d+)`,
torchvision's block names; ResNets: `(layer\\d\\.\\d|conv1|maxpool|fc)`, or
per conv `(layer\\d\\.\\d/\\w+|conv1|maxpool|fc)`) in the node's / layer's
name, "other" without one; blocks in kiln's layer order.  ORT's node events
include its profiler's own cost (a few us a node); kiln's fused layers take
the name of their first node.  --json FILE keeps the per-node / per-layer
minima and the run latencies, to group them another way without a rerun.
At 2+ threads ORT's spinning is off unless --ort-spin: its spinning
workers slow kiln's runs in the same process (compare.py, separate
processes, keeps ORT's default).
"""
import argparse
import collections
import json
import os
import re
import time

import numpy as np
import onnxruntime as ort

from ab_libs import Kiln


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib"), ap.add_argument("engine"), ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--block-re", default=r"(features\.\d+)")
    ap.add_argument("--json", help="write {kiln: {layer: ms}, ort: {node: ms}, latency: {kiln, ort}} here")
    ap.add_argument("--profile-dir", default="build-scratch")
    ap.add_argument("--gap-ms", type=float, default=2.0,
                    help="sleep between inferences: ORT's pool threads spin after a run (and kiln's "
                         "yield), so that the one after it gets the cores (at --threads 2 and more)")
    spin = ap.add_mutually_exclusive_group()
    spin.add_argument("--ort-no-spin", dest="ort_spin", action="store_false", default=None,
                      help="session.intra_op.allow_spinning=0: ORT's idle pool threads block instead of "
                           "spinning into the next kiln run (the default at --threads 2 and more)")
    spin.add_argument("--ort-spin", dest="ort_spin", action="store_true",
                      help="ORT's default spinning, as compare.py runs it (at 2+ threads its spinning workers "
                           "slow kiln's runs in this process: MobileNetV2's kiln minimum 5.8 against 3.2 ms, "
                           "bench/README.md session 28)")
    a = ap.parse_args()
    os.makedirs(a.profile_dir, exist_ok=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_profiling = True
    if a.ort_spin is None:
        a.ort_spin = a.threads < 2
    if not a.ort_spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    print("ORT intra-op spinning %s" % ("on" if a.ort_spin else "off"))
    so.profile_file_prefix = os.path.join(a.profile_dir, "ort_blocks")
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(1).standard_normal([d if isinstance(d, int) else 1 for d in inp.shape]).astype(np.float32)
    k = Kiln(a.lib, a.engine, a.threads, {inp.name: x.shape})
    kmin, lat = {}, [[], []]
    for i in range(a.iterations + 2):
        for s in ((0, 1) if i % 2 == 0 else (1, 0)):
            if a.gap_ms:
                time.sleep(a.gap_ms / 1e3)
            t = time.perf_counter()
            if s == 0:
                k.run()
            else:
                sess.run(None, {inp.name: x})
            t = time.perf_counter() - t
            if i < 2:
                continue
            lat[s].append(t * 1e3)
            if s == 0:
                for n, ms in k.layers():
                    kmin[n] = min(kmin.get(n, 1e30), ms)
    prof = sess.end_profiling()
    omin = {}
    with open(prof) as f:
        for ev in json.load(f):
            if ev.get("cat") == "Node" and ev["name"].endswith("_kernel_time"):
                n = ev["name"][:-len("_kernel_time")]
                omin[n] = min(omin.get(n, 1e30), ev["dur"] / 1e3)
    os.remove(prof)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"kiln": kmin, "ort": omin, "latency": {"kiln": lat[0], "ort": lat[1]}}, f, indent=0)
    rx = re.compile(a.block_re)

    def block(n):
        m = rx.search(n)
        return m.group(1) if m else None

    ks, os_ = collections.defaultdict(float), collections.defaultdict(float)
    for n, ms in kmin.items():
        ks[block(n)] += ms
    for n, ms in omin.items():
        os_[block(n)] += ms
    order = list(dict.fromkeys([block(n) for n in kmin] + [block(n) for n in omin]))
    order = [b for b in order if b is not None] + [None]
    w = max([12] + [len(b) for b in order if b])
    print("%-*s %9s %9s %9s %6s" % (w, "block", "ORT ms", "kiln ms", "k - O", "O/k"))
    for b in order:
        nm = "other" if b is None else b
        print("%-*s %9.3f %9.3f %+9.3f %6.2f" % (w, nm, os_[b], ks[b], ks[b] - os_[b], os_[b] / ks[b] if ks[b] else 0))
    print("%-*s %9.3f %9.3f %+9.3f %6.2f" % (w, "sum", sum(os_.values()), sum(ks.values()),
                                             sum(ks.values()) - sum(os_.values()),
                                             sum(os_.values()) / sum(ks.values())))
    for s, nm in ((0, "kiln"), (1, "ORT")):
        v = sorted(lat[s])
        print("%s: run min %.3f ms, median %.3f ms" % (nm, v[0], v[len(v) // 2]))


if __name__ == "__main__":
    main()
