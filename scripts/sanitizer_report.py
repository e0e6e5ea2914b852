#!/usr/bin/env python3
"""sanitizer_report.py — judge compute-sanitizer memcheck logs of processes
that load other CUDA libraries besides kiln (the Python GPU samples: torch,
Triton, CuPy, Numba, cuda-python).

usage: sanitizer_report.py LOG...   (exit 1 when any log fails)

Each error record of a log is classified:
  - a memory error (invalid/misaligned access, out of bounds, a kernel
    fault, anything that is not an API error): always counted, whichever
    kernel made it;
  - an API error ("Program hit CUDA_ERROR_... on CUDA API call to cuX"):
    counted when the failing call was made by kiln — the first host frame
    below the CUDA driver and runtime libraries lies in libkiln or in the
    kiln Python extension (_kiln) — and reported, not counted, when another
    library made it.  That is the only suppression, and the report lists
    each suppressed error with the library that made the call, as evidence.
A log also fails when compute-sanitizer did not finish (no ERROR SUMMARY)
or the program under it failed (its PASS line is missing).
"""
import re
import sys
from collections import Counter

PREFIX = "========= "
DRIVER_LIBS = re.compile(r"(^|/)(libcuda\.so|libcudart[^/]*\.so|libcudadebugger)")
KILN_LIBS = re.compile(r"(^|/)(libkiln[^/]*\.so|_kiln[^/]*\.so)")
API = re.compile(r"Program hit (\S+) .*on CUDA API call to (\S+?)\.?$")


def records(text):
    """The error records: lists of lines (prefix removed), one per error."""
    out, cur = [], None
    for line in text.splitlines():
        if not line.startswith("=========") or "ERROR SUMMARY" in line or "COMPUTE-SANITIZER" in line:
            continue
        body = line[len(PREFIX):] if line.startswith(PREFIX) else ""
        if not body.strip():
            cur = None
            continue
        if not body.startswith(" "):  # a record's first line
            cur = [body]
            out.append(cur)
        elif cur is not None:
            cur.append(body.strip())
    return out


def caller(rec):
    """The library that made the failing driver call: the first host frame
    outside the driver and the CUDA runtime."""
    for line in rec:
        m = re.match(r"Host Frame:.* in (\S+)$", line)
        if m and not DRIVER_LIBS.search(m.group(1)):
            return m.group(1).rsplit("/", 1)[-1]
    return "?"


def judge(path):
    text = open(path, errors="replace").read()
    mem, kiln_api, other_api = [], [], Counter()
    for rec in records(text):
        m = API.search(rec[0])
        if not m:
            mem.append(rec)
            continue
        who = caller(rec)
        if KILN_LIBS.search(who) or who == "?":
            kiln_api.append((m.group(1), m.group(2), who))
        else:
            other_api[(m.group(1), m.group(2), who)] += 1
    finished = "ERROR SUMMARY" in text
    passed = re.search(r"^PASS$", text, re.M) is not None
    ok = finished and passed and not mem and not kiln_api
    name = path.rsplit("/", 1)[-1]
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {len(mem)} memory error(s), {len(kiln_api)} API error(s) "
          f"from kiln, {sum(other_api.values())} from other libraries (not counted)"
          f"{'' if finished else '; sanitizer did not finish'}{'' if passed else '; no PASS'}")
    for rec in mem[:5]:
        print("     memory: " + " | ".join(rec[:3]))
    for err, call, who in kiln_api[:5]:
        print(f"     kiln API error: {err} from {call} (called from {who})")
    for (err, call, who), n in sorted(other_api.items()):
        print(f"     not counted: {err} from {call}, called by {who} (x{n})")
    return ok


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    results = [judge(p) for p in paths]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
