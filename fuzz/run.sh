#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR/fuzz for SECONDS each, from the
# repository root, and prints per target the executions run and whether it
# crashed. Seeds come from fuzz/corpus/<name>/ (read-only); what the fuzzer
# learns goes to BUILD_DIR/corpus/<name>/, crash reproducers and logs to
# BUILD_DIR/crashes/<name>/. Exit 1 if any target crashed.
#   fuzz/run.sh [BUILD_DIR] [SECONDS] [FILTER]    FILTER: substring of target names
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
seconds=${2:-60}
filter=${3:-}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
summary=() crashed=0
for bin in "$build"/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin"); name=${name#fuzz_}
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  work="$build/corpus/$name" crashes="$build/crashes/$name"
  mkdir -p "$work" "$crashes"
  seeds=(); [ -d "fuzz/corpus/$name" ] && seeds=("fuzz/corpus/$name")
  dict=(); [ -f "fuzz/dict/$name.dict" ] && dict=(-dict="fuzz/dict/$name.dict")
  echo "== fuzz_$name (${seconds}s)"
  "$bin" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$work" "${seeds[@]}" > "$crashes/log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$crashes/log" | tail -1)
  found=$(find "$crashes" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  if [ $rc -ne 0 ]; then
    crashed=1
    grep -m1 -E '^==[0-9]+==ERROR|runtime error|fuzz check failed|ALARM|out-of-memory' "$crashes/log"
    echo "   reproducers: $(find "$crashes" -maxdepth 1 -type f ! -name log | tr '\n' ' ')"
  fi
  line=$(printf '%-16s %12s execs  %s' "$name" "${execs:-?}" "$([ $rc -eq 0 ] && echo "no crash" || echo "CRASH ($found reproducer(s) in $crashes)")")
  echo "   $line"
  summary+=("$line")
done
echo "== summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
exit $crashed
