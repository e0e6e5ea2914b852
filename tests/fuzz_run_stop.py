#!/usr/bin/env python3
"""fuzz/run.sh leaves its summary however it is stopped.

A bundle directory holds run.sh and a stand-in engine_fuzz that prints one
libFuzzer fork-mode status line, leaves a crash file, then waits to be
stopped (as the real one runs for SECONDS).  Once the line is in the log,
run.sh is stopped in one of the ways a caller stops it:
- SIGTERM or SIGINT to run.sh alone (kill PID, Ctrl-C): the summary on
  stdout and in out/summary_engine.txt names the signal, the executions of
  the status line and the crash file, within seconds;
- `timeout` from outside around a pipeline `run.sh | cat`: timeout signals
  its whole process group, so the reader of run.sh's output dies with it;
  the summary file must still say "stopped by SIGTERM";
- SIGKILL to run.sh (nothing can be trapped): the summary file, rewritten
  while the fuzzer ran, must still hold the executions and the crash file.

    python3 tests/fuzz_run_stop.py ROOT
"""
import os
import shutil
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

COMMON = ["executions:  4321", "crash files: 1", "crash-stand-in"]


def bundle(root, d):
    shutil.copy(os.path.join(root, "fuzz", "run.sh"), os.path.join(d, "run.sh"))
    os.makedirs(os.path.join(d, "seed_engine"))
    os.makedirs(os.path.join(d, "lib"))
    fake = os.path.join(d, "engine_fuzz")
    with open(fake, "w") as f:
        f.write(FAKE)
    os.chmod(fake, 0o755)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def wait_started(d, p, what):
    """Until the stand-in's status line is in the log and run.sh has written
    a summary from it (the running summaries come every second here)."""
    log, summ = os.path.join(d, "out", "fuzz_engine.log"), os.path.join(d, "out", "summary_engine.txt")
    t0 = time.time()
    while not ("#4321" in read(log) and "executions:  4321" in read(summ)):
        if time.time() - t0 > 60 or p.poll() is not None:
            stop_group(p)
            sys.exit("%s: the stand-in fuzzer never started (%s)" % (what, p.communicate()[0]))
        time.sleep(0.05)


def stop_group(p):
    """End what this test started: run.sh's session (its own process group)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def check(what, text, want, rc=None):
    missing = [w for w in want if w not in text]
    if missing or rc == 0:
        sys.exit("%s: exit %s, summary lacks %s:\n%s" % (what, rc, missing, text))


def start(d, argv):
    env = dict(os.environ, KILN_FUZZ_SUMMARY_EVERY="1")
    return subprocess.Popen(argv, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)


def signalled(root, sig):
    what = "run.sh %s" % sig.name
    with tempfile.TemporaryDirectory() as d:
        bundle(root, d)
        p = start(d, ["sh", os.path.join(d, "run.sh"), "1", "3600", "engine"])
        wait_started(d, p, what)
        p.send_signal(sig)
        try:
            out = p.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            stop_group(p)
            sys.exit("%s: still running 30 s after the signal" % what)
        stop_group(p)
        want = COMMON + ["stopped by %s" % sig.name, "libFuzzer exit 72"]
        check(what + " (stdout)", out, want, p.returncode)
        check(what + " (summary file)", read(os.path.join(d, "out", "summary_engine.txt")), want)
        print("%s: summary printed and written, exit %d" % (what, p.returncode))


def timeout_pipeline(root):
    what = "timeout around run.sh | cat"
    if not shutil.which("timeout"):
        print("%s: skipped (no timeout command)" % what)
        return
    with tempfile.TemporaryDirectory() as d:
        bundle(root, d)
        # run.sh starts in about a second; 4 s leaves it time to start on a busy machine
        p = start(d, ["timeout", "4", "sh", "-c", "sh ./run.sh 1 3600 engine | cat"])
        try:
            out = p.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            stop_group(p)
            sys.exit("%s: still running 60 s after it started" % what)
        time.sleep(0.5)  # run.sh may finish its file just after the pipeline's reader died
        stop_group(p)
        summ = read(os.path.join(d, "out", "summary_engine.txt"))
        if "#4321" not in read(os.path.join(d, "out", "fuzz_engine.log")):
            print("%s: skipped (the stand-in did not start within 4 s: machine too busy)" % what)
            return
        check(what + " (summary file)", summ, COMMON + ["stopped by SIGTERM"])
        print("%s: summary written (stdout had %d bytes)" % (what, len(out)))


def killed(root):
    what = "run.sh SIGKILL"
    with tempfile.TemporaryDirectory() as d:
        bundle(root, d)
        p = start(d, ["sh", os.path.join(d, "run.sh"), "1", "3600", "engine"])
        wait_started(d, p, what)
        p.kill()
        p.wait(timeout=30)
        summ = read(os.path.join(d, "out", "summary_engine.txt"))
        stop_group(p)  # the stand-in fuzzer it leaves behind (which holds its stdout)
        p.communicate(timeout=30)
        check(what + " (summary file)", summ, COMMON + ["state:       running"])
        print("%s: the running summary is there" % what)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signalled(root, sig)
    timeout_pipeline(root)
    killed(root)


if __name__ == "__main__":
    main()
