#!/usr/bin/env bash
# bench/spec_decode.sh - the speculative-decoding figures of docs/spec_decode.md,
# each a ratio against the same engine without speculation, measured in one
# run (build/bench/bench_spec: single request, greedy, decode tokens/s,
# median over rounds, alternating plain / speculative rounds).
#
#   bench/spec_decode.sh [--rounds 3] [--max-tokens 96] [--only ngram,pair,tinyllama]
#
# Rows:
#   ngram      n-gram prompt lookup on input-copying prompts (bench_spec
#              --task: "passage", repeat a passage longer than the timed
#              output; "short", the earlier passage of 64 tokens, after
#              which the model writes freely for the rest of max_tokens;
#              "code", rewrite a Python function with a variable renamed),
#              SmolLM2-135M-Instruct Q4_1 and (short) stories260K, k = 3 and
#              4, adaptive k; and
#              stories260K on a repeat-style prompt it does copy in part
#              ("The dog ran. The dog ran. ...": the 260K-parameter model
#              does not repeat a passage, but continues a repetition)
#   pair       self-speculation by quantization: SmolLM2-135M-Instruct in F32
#              as the target, its published Q4_1 file as the draft. The F32
#              copy is made here, once, by gguf-py's dequantizer
#              (tests/ref/real_models_ref.py dequantize, the same file
#              tests/test_real_models.sh makes) into
#              ~/.cache/vllmc/models/derived/<name>-f32-<sha256 prefix>.gguf
#   tinyllama  a TinyLlama-1.1B-shaped random model in F16 with its own Q4_0
#              quantization as the draft. Random weights give nearly equal
#              logits, so Q4_0 rounding noise flips most argmaxes: the target
#              is made here (once) from the same random weights rounded
#              through Q4_0 first (tools/make_gguf.py --snap q4_0), so the
#              Q4_0 draft holds exactly the target's weights and differs only
#              by the kernels' arithmetic. A short prompt: the draft's first
#              proposal fills its cache over the whole prompt (compute-bound,
#              a row of the draft per prompt token), which 48 output tokens
#              of a long prompt cannot pay back, and the adaptive k then
#              rightly drafts nothing. bench/side_by_side.sh writes the
#              random model and the Q4_0 file to $VLLMC_BENCH_DIR or
#              /tmp/vllmc-bench (skipped if absent)
# Needs: make (build/bench/bench_spec), scripts/fetch_models.sh smollm2, and
# .venv (gguf) for the F32 copy. The machine's load is printed: a loaded
# machine moves every figure.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=3 max_tokens=96 only=ngram,pair,tinyllama
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "usage: bench/spec_decode.sh [--rounds N] [--max-tokens N] [--only ngram,pair,tinyllama]" >&2; exit 2 ;;
  esac
done
B=build/bench/bench_spec
[ -x $B ] || { echo "bench/spec_decode.sh: $B is missing: run make" >&2; exit 1; }
models=${VLLMC_MODELS:-$HOME/.cache/vllmc/models}
smol=$models/SmolLM2-135M-Instruct.Q4_1.gguf
echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), rounds $rounds, max_tokens $max_tokens"
row() { # label, then bench_spec arguments
  local label=$1; shift
  local out
  out=$($B --rounds "$rounds" --max-tokens "$max_tokens" --threads 2 "$@" 2>/dev/null | tail -1)
  echo "$label | $out"
  echo "  command: $B --rounds $rounds --max-tokens $max_tokens --threads 2 $*"
}
if [[ $only == *ngram* ]]; then
  for k in 3 4; do
    row "ngram stories260K k=$k adaptive (short passage)" --model models/stories260K --k $k --adaptive --task short
    if [ -s "$smol" ]; then row "ngram SmolLM2-135M Q4_1 k=$k adaptive (passage)" --model "$smol" --k $k --adaptive --task passage
    else echo "ngram SmolLM2: skipped ($smol missing: scripts/fetch_models.sh smollm2)"; fi
  done
  if [ -s "$smol" ]; then
    row "ngram SmolLM2-135M Q4_1 k=3 adaptive (short passage)" --model "$smol" --k 3 --adaptive --task short
    for k in 3 4; do row "ngram SmolLM2-135M Q4_1 k=$k adaptive (code edit)" --model "$smol" --k $k --adaptive --task code; done
  fi
  rep="The dog ran. The dog ran. The dog ran. The dog ran. The dog ran. The dog"
  for k in 3 4; do row "ngram stories260K repeat prompt k=$k adaptive" --model models/stories260K --k $k --adaptive --prompt "$rep"; done
fi
if [[ $only == *pair* ]]; then
  if [ ! -s "$smol" ]; then echo "pair SmolLM2: skipped ($smol missing: scripts/fetch_models.sh smollm2)"
  else
    derived=$models/derived
    f32=$derived/$(basename "$smol" .gguf)-f32-$(sha256sum "$smol" | cut -c1-16).gguf
    if [ ! -s "$f32" ]; then
      mkdir -p "$derived"
      if .venv/bin/python tests/ref/real_models_ref.py dequantize "$smol" "$f32.tmp" >/dev/null 2>&1; then mv "$f32.tmp" "$f32"
      else rm -f "$f32.tmp"; echo "pair SmolLM2: skipped (dequantizing to F32 failed: .venv with gguf?)"; fi
    fi
    if [ -s "$f32" ]; then
      for k in 3 4; do row "draft_model SmolLM2 F32 <- Q4_1 k=$k adaptive" --model "$f32" --draft "$smol" --k $k --adaptive; done
    fi
  fi
fi
if [[ $only == *tinyllama* ]]; then
  dir=${VLLMC_BENCH_DIR:-/tmp/vllmc-bench}
  snap=$dir/tinyllama-f16-snap-q4_0.gguf
  if [ ! -s "$snap" ] && [ -s "$dir/tinyllama/config.json" ]; then
    /usr/bin/python3 tools/make_gguf.py "$dir/tinyllama" "$snap.tmp" --type f16 --snap q4_0 >/dev/null && mv "$snap.tmp" "$snap"
  fi
  if [ -s "$snap" ] && [ -s "$dir/tinyllama-q4_0.gguf" ]; then
    for k in 3 4; do
      row "draft_model TinyLlama-shaped F16 (Q4_0-rounded) <- Q4_0 k=$k adaptive" --model "$snap" \
        --draft "$dir/tinyllama-q4_0.gguf" --k $k --adaptive --max-tokens 48 --prompt "Once upon a time"
    done
  else echo "tinyllama: skipped (no $dir/tinyllama/ and $dir/tinyllama-q4_0.gguf: bench/side_by_side.sh --only decode writes them)"; fi
fi
