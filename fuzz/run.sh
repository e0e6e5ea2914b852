#!/bin/sh
# run.sh — fuzz one target of a bundle made by `fuzz/build.sh pack DIR`, on
# a machine with idle cores (no compiler, no kiln checkout needed).
#
#   sh DIR/run.sh JOBS SECONDS [TARGET] [OUT_DIR]
#
# TARGET is engine (default) or onnx.  Runs libFuzzer with -fork=JOBS (JOBS
# worker processes at once) for SECONDS of wall time, going on after
# crashes, timeouts and out-of-memory inputs; new corpus entries go to
# OUT_DIR/corpus_TARGET, crash/timeout/leak inputs to OUT_DIR/ (default
# OUT_DIR: DIR/out), the log to OUT_DIR/fuzz_TARGET.log.  Prints the total
# executions, the CPU time the fuzzer used (user + system of all its
# processes), and the crash files found, also when stopped early by TERM or
# INT (then over what ran).  Exit status 0 when none.
set -u
D=$(cd "$(dirname "$0")" && pwd)
JOBS=${1:?usage: run.sh JOBS SECONDS [engine|onnx] [OUT_DIR]}
SEC=${2:?usage: run.sh JOBS SECONDS [engine|onnx] [OUT_DIR]}
T=${3:-engine}
O=${4:-$D/out}
case $T in engine | onnx) ;; *) echo "run.sh: target must be engine or onnx, not '$T'" >&2; exit 2 ;; esac
mkdir -p "$O/corpus_$T"
export LD_LIBRARY_PATH="$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# a failed allocation must be a clean KILN_ENOMEM: kiln's allocator may return NULL
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1}
LOG=$O/fuzz_$T.log
cpu() { # user + system seconds of this shell's finished children (clock ticks in /proc)
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($16 + $17) / hz }' /proc/$$/stat
}
c0=$(cpu)
t0=$(date +%s)
# In the background, so that a TERM or INT sent to this script (a timeout,
# Ctrl-C) interrupts the wait: the fuzzer is then stopped (libFuzzer ends
# its jobs and prints its final status) and the summary below still covers
# what ran.
"$D/${T}_fuzz" -fork="$JOBS" -max_total_time="$SEC" -max_len=262144 -timeout=60 \
  -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -artifact_prefix="$O/" "$O/corpus_$T" "$D/seed_$T" >"$LOG" 2>&1 &
pid=$!
stopped=""
trap 'stopped=" (stopped by SIGTERM)"; kill -TERM "$pid" 2>/dev/null' TERM
trap 'stopped=" (stopped by SIGINT)"; kill -TERM "$pid" 2>/dev/null' INT
wait "$pid"
rc=$?
# a trapped signal ends the first wait early: wait for the fuzzer's own end
while kill -0 "$pid" 2>/dev/null; do
  wait "$pid"
  rc=$?
done
trap - TERM INT
c1=$(cpu)
t1=$(date +%s)
# fork mode's status lines: "#RUNS: cov: .. corp: .. exec/s: .. oom/timeout/crash: a/b/c time: ..s job: .."
last=$(grep -E '^#[0-9]+:? ' "$LOG" | tail -1)
execs=$(echo "$last" | sed -n 's/^#\([0-9]*\).*/\1/p')
echo "target:      $T ($JOBS jobs, $((t1 - t0)) s wall, libFuzzer exit $rc)$stopped"
echo "executions:  ${execs:-unknown}"
echo "cpu:         $(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.0f s (%.2f CPU-hours)", b - a, (b - a) / 3600 }')"
echo "last status: $last"
n=0
for f in "$O"/crash-* "$O"/leak-* "$O"/timeout-* "$O"/oom-*; do
  [ -e "$f" ] || continue
  n=$((n + 1))
  echo "found:       $f"
done
echo "crash files: $n (in $O; replay one: KILN_FUZZ_VERBOSE=1 $D/${T}_fuzz FILE)"
[ "$n" = 0 ]
