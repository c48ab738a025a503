#!/usr/bin/env bash
# bench/side_by_side.sh and its helpers parse and answer --help; bench/membw
# measures something and rejects bad arguments. (The benchmark itself takes
# tens of minutes and is never run by the suite.)
# checks: 23
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
for s in bench/side_by_side.sh bench/llamacpp/build.sh bench/llamacpp/run.sh bench/blas/run.sh; do
  n=$(basename "$(dirname "$s")")_$(basename "$s" .sh)
  if bash -n "$s" 2>/dev/null; then echo "ok syntax_$n"; else echo "FAIL syntax_$n: bash -n"; fi
done
out=$(bench/side_by_side.sh --help 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q -- '--only LIST' <<<"$out" && grep -q -- '--quick' <<<"$out"; then
  echo "ok sbs_help"
else
  echo "FAIL sbs_help: status $rc: $out"
fi
out=$(bench/side_by_side.sh --bogus 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "unknown option '--bogus'" <<<"$out"; then echo "ok sbs_bad_option"
else echo "FAIL sbs_bad_option: status $rc: $out"; fi
out=$(bench/side_by_side.sh --only decode,nonsense 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "unknown --only item 'nonsense'" <<<"$out"; then echo "ok sbs_bad_only"
else echo "FAIL sbs_bad_only: status $rc: $out"; fi
for bad in "--rate-x 0.9,x" "--rate-x 0" "--rate -1"; do
  # shellcheck disable=SC2086
  out=$(bench/side_by_side.sh $bad 2>&1); rc=$?
  if [ $rc -eq 2 ] && grep -q "take positive numbers" <<<"$out"; then echo "ok sbs_bad_rate:${bad// /=}"
  else echo "FAIL sbs_bad_rate:${bad// /=}: status $rc: $out"; fi
done
out=$(bench/side_by_side.sh --only longctx --long-ctx 4096,x 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "take positive integers, not 'x'" <<<"$out"; then echo "ok sbs_bad_long_ctx"
else echo "FAIL sbs_bad_long_ctx: status $rc: $out"; fi
out=$(bench/side_by_side.sh --only longctx --long-batch-ctx 0 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "take positive integers, not '0'" <<<"$out"; then echo "ok sbs_bad_long_batch_ctx"
else echo "FAIL sbs_bad_long_batch_ctx: status $rc: $out"; fi
out=$(bench/side_by_side.sh --isa avx512 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "takes native or avx2, not 'avx512'" <<<"$out"; then echo "ok sbs_bad_isa"
else echo "FAIL sbs_bad_isa: status $rc: $out"; fi
out=$(bench/llamacpp/build.sh --isa sse2 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "takes native or avx2, not 'sse2'" <<<"$out"; then echo "ok llamacpp_build_bad_isa"
else echo "FAIL llamacpp_build_bad_isa: status $rc: $out"; fi
out=$(bench/side_by_side.sh --threads 0 2>&1); rc=$?
if [ $rc -eq 2 ]; then echo "ok sbs_bad_threads"; else echo "FAIL sbs_bad_threads: status $rc: $out"; fi

m=$build/bench/membw
out=$("$m" --threads 2 --mb 64 --repeat 2 2>&1); rc=$?
bw=$(sed -n 's/^read bandwidth: \([0-9.]*\) GB\/s (2 threads, 8 streams each, 64 MiB, best of 2;.*/\1/p' <<<"$out")
if [ $rc -eq 0 ] && awk -v b="$bw" 'BEGIN { exit !(b > 0.1 && b < 1000) }'; then echo "ok membw_runs"
else echo "FAIL membw_runs: status $rc: $out"; fi
for bad in "--threads 0" "--streams 0" "--streams 65" "--mb 0" "--repeat" "--prefetch -1" "--frobnicate 1"; do
  # shellcheck disable=SC2086
  "$m" $bad >/dev/null 2>&1; rc=$?
  if [ $rc -eq 2 ]; then echo "ok membw_rejects:${bad// /=}"; else echo "FAIL membw_rejects:${bad// /=}: status $rc"; fi
done
