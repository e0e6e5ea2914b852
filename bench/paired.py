#!/usr/bin/env python3
"""kiln against ONNX Runtime in one process, alternating per inference: for hosts whose speed drifts.

    python3 bench/paired.py LIB ENGINE MODEL.onnx [--threads N] [--pairs N] [--input NAME=SHAPE]
                            [--gap-ms MS] [--warmup N] [--best-of K]

compare.py alternates rounds of several inferences in separate processes; on a
host whose cores are shared with other tenants (the GPU machines' Intel hosts,
session 19: one 1-thread ResNet-50 run took 52 or 75 ms by core and minute) a
slow stretch can cover one side's round and not the other's.  Here kiln (LIB,
ENGINE, through the C API: ab_libs.py's Kiln, profiling off) and ORT (MODEL.onnx,
intra-op threads N, sequential, as compare.py sets it) run one inference each,
in turn, ORT first then kiln, then kiln first, and so on; each pair's ratio
ORT / kiln is taken from two inferences a few milliseconds apart.  Printed: the
CPU model, ORT's version, each side's min and median, the ratio of the medians
and the median of the per-pair ratios (with its quartiles).  At 2+ threads ORT's
workers spin after a run for longer than a kiln inference takes (MobileNetV2 at 2
threads on the 2-vCPU VM, session 20: kiln 3.9 ms beside them against 1.85 alone),
and a pause to let them stop is no cure: an idle vCPU comes back slow (kiln's first
three runs after a 30 ms sleep 4.1, 3.8, 3.3 ms, the fourth 2.15).  So at 2+ threads
ORT's session sets "session.intra_op.spin_duration_us" (--ort-spin-us, default 1000):
its workers spin between a Run's parallel sections as by default (gaps of microseconds)
and stop 1 ms after it (by default ~33 ms of CPU after each MobileNetV2 run here).
Measured alone, back to back, MobileNetV2 at 2 threads: ORT by default 1.74-1.89 ms,
with 1000 us 1.77-1.84 (with "session.force_spinning_stop", which stops them when Run
returns, 1.79-1.93: a few percent slower, so not that).  The CPU ORT's workers take in
the 50 ms after a run is printed (about 1-2 ms: the setting took).  Even that 1 ms
took a CPU from the kiln turn right after ORT's on the Intel VM (session 32,
MobileNetV2 at 2 threads: kiln's median 4.1-4.5 ms against 3.2-3.5 with ORT's
spinning off, per-pair ratio 1.03-1.11), so at 2+ threads each turn, both sides',
is followed by a pause of twice --ort-spin-us (--gap-ms sets another; 0: none):
there the ratio was 1.24 in two runs (1.60 with ORT's spinning off, which slows
ORT).  At 1 thread the turns follow each other without a pause.
--best-of K: each turn is K inferences and counts its fastest (a host that
takes a core away for milliseconds at a time, as the Intel hosts' other tenants
do at 2 threads, then spoils a turn only when it hits all K).  Same random input
for both; the outputs are compared once (largest difference over largest magnitude).
"""
import argparse
import ctypes as C
import time

import numpy as np

from ab_libs import Kiln, cpu_model, shape_of


def ort_session(ort, model, threads, spin_us):
    """ORT as compare.py runs it (intra-op threads, sequential), its workers
    spinning at most spin_us after a run at 2+ threads (None: ORT's default)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if threads > 1 and spin_us is not None:
        so.add_session_config_entry("session.intra_op.spin_duration_us", str(spin_us))
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def alternate(run_ort, run_kiln, pairs, gap, best_of=1):
    """pairs turns of each, ORT first in even pairs and kiln in odd ones; a
    turn is best_of calls (its fastest counts), then gap seconds idle.
    Returns the two lists of turn times, in seconds."""
    def turn(f):
        best = float("inf")
        for _ in range(max(best_of, 1)):
            t0 = time.perf_counter()
            f()
            best = min(best, time.perf_counter() - t0)
        time.sleep(gap)
        return best

    to, tk = [], []
    for i in range(pairs):
        if i % 2:
            b = turn(run_kiln)
            to.append(turn(run_ort)), tk.append(b)
        else:
            o = turn(run_ort)
            to.append(o), tk.append(turn(run_kiln))
    return to, tk


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib")
    ap.add_argument("engine")
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--input", action="append", default=[], help="NAME=SHAPE (default input=1x3x224x224)")
    ap.add_argument("--gap-ms", type=float, default=None)
    ap.add_argument("--best-of", type=int, default=1)
    ap.add_argument("--ort-spin-us", type=int, default=1000)
    a = ap.parse_args()
    import onnxruntime as ort  # (after --help: it needs no ORT)

    inputs = dict(shape_of(s) for s in a.input) or {"input": (1, 3, 224, 224)}
    k = Kiln(a.lib, a.engine, a.threads, inputs)
    k.L.kiln_context_set_profiling(k.ctx, 0)
    sess = ort_session(ort, a.model, a.threads, a.ort_spin_us)
    feeds = {n: k.bufs[n] for n in inputs}
    out = sess.get_outputs()[0]
    ref = sess.run(None, feeds)[0]
    y = np.full(ref.shape, np.nan, dtype=np.float32)
    if k.L.kiln_context_bind(k.ctx, out.name.encode(), y.ctypes.data_as(C.c_void_p), C.c_size_t(y.nbytes)):
        raise SystemExit("bind %s: %s" % (out.name, k.L.kiln_errmsg().decode()))
    k.run()
    diff = float(np.max(np.abs(y - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
    gap_ms = 2 * a.ort_spin_us / 1e3 if a.gap_ms is None else a.gap_ms
    gap = gap_ms / 1e3 if a.threads > 1 else 0.0

    def run_ort():
        sess.run(None, feeds)

    alternate(run_ort, k.run, a.warmup, gap, a.best_of)
    sess.run(None, feeds)
    c0 = time.process_time()
    time.sleep(0.05)
    spin_ms = (time.process_time() - c0) * 1e3
    to, tk = alternate(run_ort, k.run, a.pairs, gap, a.best_of)
    r = np.array(to) / np.array(tk)
    q1, q2, q3 = np.percentile(r, [25, 50, 75])
    print("%s | %s | ONNX Runtime %s | %d threads | %d pairs, best of %d, %.1f ms after each turn "
          "| max diff / max abs ref %.2g"
          % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cpu_model(), ort.__version__, a.threads, a.pairs,
             max(a.best_of, 1), gap * 1e3, diff))
    print("ORT's workers after a run: %.1f ms of CPU in the next 50 ms" % spin_ms)
    print("ORT  min %.3f ms  median %.3f ms" % (min(to) * 1e3, np.median(to) * 1e3))
    print("kiln min %.3f ms  median %.3f ms" % (min(tk) * 1e3, np.median(tk) * 1e3))
    print("ORT/kiln: by medians %.2f, by min %.2f, per pair median %.2f (quartiles %.2f-%.2f)"
          % (np.median(to) / np.median(tk), min(to) / min(tk), q2, q1, q3))


if __name__ == "__main__":
    main()
