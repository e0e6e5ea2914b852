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
# processes), and the crash files found.  Exit status 0 when none.
#
# The summary is also OUT_DIR/summary_TARGET.txt, rewritten every few
# seconds while the fuzzer runs ("state: running") and once more at the end
# ("state: finished" or "state: stopped by SIG..."), so a caller always
# finds one, however run.sh ends:
# - TERM, INT or HUP sent to run.sh, or to its process group (`timeout`
#   sends both): the fuzzer is stopped (libFuzzer ends its jobs and prints
#   its final status) and the summary covers what ran;
# - the pipe its output goes to closed (a `| tee` killed with it): the
#   file is written first, before the summary goes to stdout;
# - run.sh killed outright (KILL), or left running while the shell that
#   started it was killed: the file holds the summary of a few seconds ago.
#   To stop a run early, signal run.sh itself or its process group, not a
#   subshell around it.
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
SUM=$O/summary_$T.txt
EVERY=${KILN_FUZZ_SUMMARY_EVERY:-5} # seconds between the running summaries
: >"$LOG"
# CPU seconds (user + system) from /proc/PID/stat: the process's own
# (fields 14-15) with OWN=1, plus its finished and waited-for children's
# (16-17).
cpu() {
  awk -v hz="$(getconf CLK_TCK)" -v own="$2" '{ printf "%.1f", (own * ($14 + $15) + $16 + $17) / hz }' \
    "/proc/$1/stat" 2>/dev/null || echo 0
}
c0=$(cpu $$ 0)
t0=$(date +%s)
# summary STATE CPU_SECONDS RC [WHO]: the report, to $SUM (through a
# temporary file of WHO's and mv, so a reader never sees half of it).
summary() {
  # fork mode's status lines: "#RUNS: cov: .. corp: .. exec/s: .. oom/timeout/crash: a/b/c time: ..s job: .."
  last=$(grep -E '^#[0-9]+:? ' "$LOG" | tail -1)
  execs=$(echo "$last" | sed -n 's/^#\([0-9]*\).*/\1/p')
  {
    echo "target:      $T ($JOBS jobs, $(($(date +%s) - t0)) s wall, libFuzzer exit $3)"
    echo "state:       $1 (at $(date -u +%H:%M:%S) UTC)"
    echo "executions:  ${execs:-unknown}"
    echo "cpu:         $(awk -v a="$c0" -v b="$2" 'BEGIN { printf "%.0f s (%.2f CPU-hours)", b - a, (b - a) / 3600 }')"
    echo "last status: $last"
    n=0
    for f in "$O"/crash-* "$O"/leak-* "$O"/timeout-* "$O"/oom-*; do
      [ -e "$f" ] || continue
      n=$((n + 1))
      echo "found:       $f"
    done
    echo "crash files: $n (in $O; replay one: KILN_FUZZ_VERBOSE=1 $D/${T}_fuzz FILE)"
  } >"$SUM.tmp.${4:-main}"
  mv -f "$SUM.tmp.${4:-main}" "$SUM"
}
summary "starting" "$c0" "-"
# In the background, so that a signal to this script interrupts the wait:
# the fuzzer is then stopped and the summary below still covers what ran.
"$D/${T}_fuzz" -fork="$JOBS" -max_total_time="$SEC" -max_len=262144 -timeout=60 \
  -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -artifact_prefix="$O/" "$O/corpus_$T" "$D/seed_$T" >"$LOG" 2>&1 &
pid=$!
# The running summaries: a loop beside the fuzzer that ends with it (or
# with run.sh: it checks both).  Its CPU figure adds the fuzzer's own time
# to that of its finished jobs.
(
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM INT HUP
  nap=""
  while kill -0 "$pid" 2>/dev/null && kill -0 $$ 2>/dev/null; do
    summary "running" "$(awk -v a="$(cpu $$ 0)" -v b="$(cpu "$pid" 1)" 'BEGIN { print a + b }')" "-" mon
    sleep "$EVERY" &
    nap=$!
    wait "$nap" # a signal ends this wait at once, not after the sleep
  done
) 2>/dev/null &
mon=$!
stopped=""
stop() {
  stopped="stopped by $1"
  kill -TERM "$pid" 2>/dev/null
}
trap 'stop SIGTERM' TERM
trap 'stop SIGINT' INT
trap 'stop SIGHUP' HUP
# a closed stdout must not end the script before the summary file is written
trap '' PIPE
wait "$pid"
rc=$?
# a trapped signal ends the first wait early: wait for the fuzzer's own end
while kill -0 "$pid" 2>/dev/null; do
  wait "$pid"
  rc=$?
done
trap - TERM INT HUP
kill -TERM "$mon" 2>/dev/null
wait "$mon" 2>/dev/null
summary "${stopped:-finished}" "$(cpu $$ 0)" "$rc"
cat "$SUM" 2>/dev/null
grep -q '^crash files: 0 ' "$SUM"
