#!/usr/bin/env bash
# Runs the whole suite: every build/tests/test_* binary and every tests/test_*.sh
# script, from the repository root. Each prints "ok NAME" / "FAIL NAME: ..." /
# "skip NAME: why" lines (a skip: what this machine cannot run, e.g. no AMX, no
# PyPI; never counted as passed); this counts them and ends with
# "N passed, N failed, N skipped". Exit 1 if anything failed
# (a test program that crashes or exits non-zero without a FAIL line counts as one
# failure under its own name).
#   tests/run.sh [BUILD_DIR[,BUILD_DIR...]] [FILTER]
# FILTER: substring of test program names. Several build directories (e.g.
# build,build-san) run the whole suite once per build, with one total at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
builds=${1:-build}
filter=${2:-}
# Sanitizer builds (make SAN=1 / TSAN=1): leaks are errors, every report fails its test
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
passed=0 failed=0 skipped=0
log=$(mktemp)
IFS=, read -r -a build_list <<< "$builds"
for build in "${build_list[@]}"; do
export VLLMC="$PWD/$build/vllmc" BUILD_DIR="$PWD/$build"
[ ${#build_list[@]} -gt 1 ] && echo "==== suite on $build/"
for t in "$build"/tests/test_* tests/test_*.sh; do
  [ -e "$t" ] || continue
  case "$t" in *.d|*.o) continue;; esac
  name=$(basename "$t")
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  echo "== $name"
  start=$(date +%s)
  "./$t" > "$log" 2>"$log.err"
  rc=$?
  cat "$log"
  p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^skip ' "$log")
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: exited with status $rc"
    # a sanitizer report's head names the bug; the tail is the rest of the stack
    grep -m1 -A15 -E '^==[0-9]+==ERROR|^WARNING: ThreadSanitizer|runtime error:' "$log.err" || tail -20 "$log.err"
    f=1
  elif [ "$f" -ne 0 ]; then
    tail -20 "$log.err"
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  echo "   ($name: $p passed, $f failed, $s skipped, $(( $(date +%s) - start ))s)"
done
done
rm -f "$log" "$log.err"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
