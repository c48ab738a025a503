#!/usr/bin/env bash
# test_symbols.sh - the names our archives export, read with nm.
#  1. $BUILD_DIR/libvllm.a, the shipped library, exports the public API and
#     nothing else: every defined global symbol starts with vllm_, and the set
#     equals the functions include/vllm/*.h declare (a declared function
#     missing from it is not defined, or is defined in a file that does not
#     include its public header, so -fvisibility=hidden hid it).
#  2. Every object of the library and of the CLI (src/<subsystem>/<file>.c)
#     exports only its module's names: <file> or <file>_*, a public function
#     (declared in include/vllm/), or what the table below allows it besides.
#  3. examples/offline_inference, built against libvllm.a alone with include/
#     as its only include path, runs: greedy ids from BOS on stories260K equal
#     llama2.c's (reference_bos_greedy200.json), and none of our internal names
#     is global in it (so it did not link libvllm_internal.a).
# Prints "ok NAME" / "FAIL NAME: why" lines for tests/run.sh.
# checks: 16
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
CC=${CC:-cc}
PY=/usr/bin/python3
export VLLM_LOGGING_LEVEL=WARNING LC_ALL=C   # C: sort and comm agree on the order
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }
# defined global symbols of the object files or archives given, one a line,
# sorted; ASan's ODR indicator of a global X (__odr_asan.X) counts as X
exported() {
  nm -g --defined-only "$@" 2>/dev/null | awk 'NF == 3 { sub(/^__odr_asan\./, "", $3); print $3 }' | sort -u
}
# the words on stdin as one line
oneline() { tr '\n' ' ' | sed 's/ $//'; }

# Names an object may export besides its own file name's (<file>, <file>_*)
# and the public API: an object (relative to src/, a glob), then prefixes
# (ending in _) or whole names, then a comment. Every matching line applies.
prefix_table='
base/error                vllm_error vllm_error_prefix # internal, hidden in libvllm.a
engine/request            seq_             # a request and its sequences (request.h)
kernels/matmul            kernels_         # kernels_isa_*, kernels_cpu_has_*
kernels/matmul_amx        kernels_ matmul_ # kernels_amx_*; matmul_range_amx, matmul_use_amx
kernels/quant_*           quant_           # one quant module over several files
model/config              model_           # model_config_parse, model_generation_config_parse
model/step_batch          step_builder_    # the builder of step_batch (step_batch.h)
server/openai_protocol    openai_
structured/*              st_              # one structured-outputs module over several files (structured.h)
server/serving_*          serving_         # serving_completions, serving_chat_*
template/jinja_*          jinja_           # one jinja module over several files (jinja_internal.h)
template/jinja_value      jv_              # jinja values
tokenizer/detokenizer     tokenizer_       # tokenizer_decode
tokenizer/tokenizer_gguf  tokenizer_       # tokenizer_load_gguf
cli/cmd_bench             bench_           # option helpers shared with cmd_bench_serve
cli/cmd_tokenize          cmd_detokenize   # both commands share one line loop
cli/main                  main cli_
'

# allowed OBJ: what src/OBJ (without .o) may export besides its own name, one a line
allowed() {
  local obj=$1 glob rest names
  while read -r glob rest; do
    [ -n "$glob" ] || continue
    read -r -a names <<< "${rest%%#*}"
    # shellcheck disable=SC2053  # the table's first column is a glob
    [[ $obj == $glob ]] && [ ${#names[@]} -gt 0 ] && printf '%s\n' "${names[@]}"
  done <<< "$prefix_table"
}

# the functions include/vllm/*.h declare, sorted
for h in include/vllm/*.h; do
  "$CC" -E -P -Iinclude "$h" || echo "cannot preprocess $h" >&2
done 2>"$tmp/cpp.err" | grep -oE '\bvllm_[a-z0-9_]+ *\(' | tr -d ' (' | sort -u > "$tmp/declared"

# 1. libvllm.a: the public API only
lib=$BUILD_DIR/libvllm.a
if [ ! -f "$lib" ]; then
  fail libvllm_exports_vllm_only "$lib: no such file (make all builds it)"
  fail libvllm_exports_declared_api "$lib: no such file"
else
  exported "$lib" > "$tmp/lib"
  bad=$(grep -v '^vllm_' "$tmp/lib" | oneline)
  if [ ! -s "$tmp/lib" ]; then fail libvllm_exports_vllm_only "nm found no defined global symbol in $lib"
  elif [ -n "$bad" ]; then fail libvllm_exports_vllm_only "$lib exports names without vllm_: $bad"
  else ok libvllm_exports_vllm_only; fi

  missing=$(comm -23 "$tmp/declared" "$tmp/lib" | oneline)
  extra=$(comm -13 "$tmp/declared" "$tmp/lib" | oneline)
  if [ -s "$tmp/cpp.err" ] || [ ! -s "$tmp/declared" ]; then
    fail libvllm_exports_declared_api "reading include/vllm/*.h: $(head -3 "$tmp/cpp.err")"
  elif [ -n "$missing" ]; then
    fail libvllm_exports_declared_api "declared in include/vllm/ but not exported (does the defining file include its public header?): $missing"
  elif [ -n "$extra" ]; then
    fail libvllm_exports_declared_api "exported but not declared in include/vllm/: $extra"
  else ok libvllm_exports_declared_api; fi
fi

# 2. module prefixes, one line per subsystem
for dir in src/*/; do
  sub=$(basename "$dir")
  name=module_prefixes_$sub
  srcs=("$dir"*.c)
  [ -e "${srcs[0]}" ] || continue
  bad="" unbuilt=""
  for src in "${srcs[@]}"; do
    rel=${src#src/}; rel=${rel%.c}
    obj=$BUILD_DIR/obj/src/$rel.o
    if [ ! -f "$obj" ]; then unbuilt+=" $obj"; continue; fi
    file=$(basename "$rel")
    mapfile -t extra < <(allowed "$rel")
    while read -r sym; do
      [ -n "$sym" ] || continue
      [[ $sym == "$file" || $sym == "$file"_* ]] && continue
      grep -qxF -- "$sym" "$tmp/declared" && continue
      good=0
      for a in "${extra[@]}"; do
        if [[ $a == *_ ]]; then [[ $sym == "$a"* ]] && good=1
        else [[ $sym == "$a" ]] && good=1; fi
        [ $good -eq 1 ] && break
      done
      [ $good -eq 1 ] || bad+=" $rel.o:$sym"
    done < <(exported "$obj")
  done
  if [ -n "$unbuilt" ]; then fail "$name" "not built:$unbuilt"
  elif [ -n "$bad" ]; then fail "$name" "names outside the object's module prefix (rename, or allow in tests/test_symbols.sh's table):$bad"
  else ok "$name"; fi
done

# 3. a program on the public library alone
ex=$BUILD_DIR/examples/offline_inference
name=offline_inference_on_libvllm_a
rc=0
[ -x "$ex" ] && { "$ex" models/stories260K 24 > "$tmp/out" 2> "$tmp/err"; rc=$?; }
if [ ! -x "$ex" ]; then
  fail $name "$ex: not built (make all builds it against libvllm.a)"
elif [ $rc -ne 0 ]; then
  fail $name "exit status $rc: $(tail -3 "$tmp/err")"
elif ! why=$($PY - "$tmp/out" 2>&1 <<'EOF'
import json, sys
got = [int(t) for t in open(sys.argv[1]).read().split()]
ref = json.load(open("models/stories260K/reference_bos_greedy200.json"))["greedy_ids"][:24]
assert got == ref, f"ids {got} != llama2.c's {ref}"
EOF
); then
  fail $name "$(echo "$why" | tail -1)"
else
  exported "$BUILD_DIR/libvllm_internal.a" | comm -23 - <(exported "$lib") > "$tmp/internal"
  leaked=$(exported "$ex" | comm -12 - "$tmp/internal" | head -5 | oneline)
  if [ ! -s "$tmp/internal" ]; then fail $name "no internal names read from $BUILD_DIR/libvllm_internal.a"
  elif [ -n "$leaked" ]; then fail $name "internal names are global in $ex (linked the internal archive?): $leaked"
  else ok $name; fi
fi
