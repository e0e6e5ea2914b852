#!/usr/bin/env python3
"""fuzz/run.sh stopped early (SIGTERM from a timeout, SIGINT from Ctrl-C)
still prints its summary over what ran.

A bundle directory holds run.sh and a stand-in engine_fuzz that prints one
libFuzzer fork-mode status line, then waits to be stopped (as the real one
runs for SECONDS).  Once the line is in the log, the signal goes to run.sh
alone; its summary must name the signal, the executions of the status line
and the crash file the stand-in left, and it must end within seconds.

    python3 tests/fuzz_run_stop.py ROOT
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

FAKE = """#!/bin/sh
# stand-in for libFuzzer: a status line, a crash file, then run until stopped
trap 'echo "libFuzzer: run interrupted; exiting"; exit 72' TERM
for a in "$@"; do case $a in -artifact_prefix=*) touch "${a#-artifact_prefix=}crash-stand-in" ;; esac; done
echo "#4321: cov: 10 ft: 20 corp: 3/1Kb exec/s: 100 oom/timeout/crash: 0/0/1 time: 1s job: 1 dft_time: 0"
i=0
while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done  # 60 s at most, should run.sh leave it behind
"""


def case(root, sig):
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(root, "fuzz", "run.sh")) as f, open(os.path.join(d, "run.sh"), "w") as g:
            g.write(f.read())
        os.makedirs(os.path.join(d, "seed_engine"))
        os.makedirs(os.path.join(d, "lib"))
        fake = os.path.join(d, "engine_fuzz")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, 0o755)
        p = subprocess.Popen(["sh", os.path.join(d, "run.sh"), "1", "3600", "engine"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        log = os.path.join(d, "out", "fuzz_engine.log")
        t0 = time.time()
        while not (os.path.exists(log) and "#4321" in open(log).read()):
            if time.time() - t0 > 60 or p.poll() is not None:
                p.kill()
                sys.exit("run.sh %s: the stand-in fuzzer never started (%s)" % (sig.name, p.communicate()[0]))
            time.sleep(0.05)
        p.send_signal(sig)
        try:
            out = p.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            sys.exit("run.sh %s: still running 30 s after the signal" % sig.name)
        want = ["(stopped by %s)" % sig.name, "libFuzzer exit 72", "executions:  4321", "crash files: 1",
                "crash-stand-in"]
        missing = [w for w in want if w not in out]
        if missing or p.returncode == 0:
            sys.exit("run.sh %s: exit %d, summary lacks %s:\n%s" % (sig.name, p.returncode, missing, out))
        print("run.sh %s: summary printed, exit %d" % (sig.name, p.returncode))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    for sig in (signal.SIGTERM, signal.SIGINT):
        case(root, sig)


if __name__ == "__main__":
    main()
