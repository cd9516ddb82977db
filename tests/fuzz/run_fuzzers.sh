#!/usr/bin/env bash
# Runs libFuzzer targets (built by `make fuzz`) for a fixed time each and prints a summary.
# usage: run_fuzzers.sh BUILD_DIR SECONDS JOBS TARGET...
# Each target starts from its committed seeds (tests/fuzz/corpus/<target>) plus the corpus it
# grew in earlier runs (BUILD_DIR/corpus/<target>); a crash input lands in
# BUILD_DIR/findings/<target>-crash-* and makes the script exit 1. Logs: BUILD_DIR/logs/.
set -uo pipefail
dir=$1 seconds=$2 jobs=$3
shift 3
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir/logs" "$dir/findings"
# Inputs of at most 64 KiB, 2 GiB of memory per run, no leak check at exit (LibTorch's
# process-lifetime caches), and one run stuck for 10 s is a finding too.
flags=(-max_len=65536 -rss_limit_mb=2048 -timeout=10 -detect_leaks=0 -print_final_stats=1)
run_one() {
  local t=$1
  mkdir -p "$dir/corpus/$t"
  echo "fuzz: $t for ${seconds}s"
  "$dir/bin/distrl-fuzz-$t" "${flags[@]}" -max_total_time="$seconds" -artifact_prefix="$dir/findings/$t-" \
    "$dir/corpus/$t" "$src/corpus/$t" > "$dir/logs/$t.log" 2>&1
  echo $? > "$dir/logs/$t.rc"
}
running=0
for t in "$@"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
status=0
printf '%-9s %12s %10s %8s %8s %8s  %s\n' target executions exec/s cov features corpus result
for t in "$@"; do
  log="$dir/logs/$t.log"
  stat() { grep -o "stat::$1: *[0-9]*" "$log" | tail -1 | grep -o '[0-9]*$'; }
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  corp=$(grep -o 'corp: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  rc=$(cat "$dir/logs/$t.rc")
  result=clean
  if [ "$rc" != 0 ]; then
    result="FOUND (exit $rc): $(ls "$dir/findings/$t-"* 2>/dev/null | head -1)"
    status=1
  fi
  printf '%-9s %12s %10s %8s %8s %8s  %s\n' "$t" "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" \
    "${cov:--}" "${ft:--}" "${corp:--}" "$result"
done
exit $status
