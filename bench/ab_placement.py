#!/usr/bin/env python3
"""A/B of two libkiln builds at 2+ threads, each run sorted by where the host put the threads.

    python3 bench/ab_placement.py ENGINE_A ENGINE_B [--libdir-a DIR] [--libdir-b DIR]
                                  [--kiln build/kiln] [--pairs 24] [--threads 2] [--iterations 15]

A VM's host puts its vCPUs on one die or on two and moves them within minutes
(bench/README.md, "Two vCPUs on two dies"), and some changes win on one placement
and lose on the other.  This runs `kiln bench ENGINE --threads N` for A and B in
turn (A, B, then B, A, ...), each with LD_LIBRARY_PATH=its --libdir (a directory
holding that build's libkiln.so.0; the CLI must find libkiln through its RUNPATH
or LD_LIBRARY_PATH), reads the median latency and the core round trip each run
printed, and reports, per placement (round trip above 250 ns: two dies), each
side's median of the runs' medians, its minimum and B / A.  Alternating whole
`kiln bench` processes keeps each side's caches its own across inferences (two
engines alternating in one process, as bench/ab_libs.py does, flush each other's:
BERT-base at 2 threads across dies ran 49 ms there and 54 back to back, session 24).
"""
import argparse
import os
import re
import statistics as st
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("engine_a")
    ap.add_argument("engine_b")
    ap.add_argument("--libdir-a")
    ap.add_argument("--libdir-b")
    ap.add_argument("--kiln", default=os.path.join(HERE, "..", "build", "kiln"))
    ap.add_argument("--pairs", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=15)
    a = ap.parse_args()
    sides = {"A": (a.engine_a, a.libdir_a), "B": (a.engine_b, a.libdir_b)}
    res = {k: {"one die": [], "two dies": []} for k in sides}
    for i in range(a.pairs):
        for tag in ("A", "B") if i % 2 == 0 else ("B", "A"):
            eng, lib = sides[tag]
            env = dict(os.environ)
            if lib:
                env["LD_LIBRARY_PATH"] = lib
            out = subprocess.run([a.kiln, "bench", eng, "--threads", str(a.threads), "--iterations",
                                  str(a.iterations), "--warmup", "3"], capture_output=True, text=True, env=env)
            med = re.search(r"median ([0-9.]+)", out.stdout)
            rt = re.search(r"round trip: (\d+)", out.stdout)
            if not med or not rt:
                sys.exit("kiln bench %s: %s" % (eng, (out.stderr or out.stdout).strip()[-400:]))
            place = "two dies" if int(rt.group(1)) > 250 else "one die"
            res[tag][place].append(float(med.group(1)))
            print("%s %s round trip %s ns, median %s ms" % (tag, place, rt.group(1), med.group(1)), flush=True)
    for place in ("one die", "two dies"):
        la, lb = res["A"][place], res["B"][place]
        if la and lb:
            print("%s: A median %.3f ms (n %d, min %.3f)  B median %.3f ms (n %d, min %.3f)  B/A %.3f" %
                  (place, st.median(la), len(la), min(la), st.median(lb), len(lb), min(lb),
                   st.median(lb) / st.median(la)))


if __name__ == "__main__":
    main()
