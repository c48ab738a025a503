#!/usr/bin/env bash
# test_gemma3_ref.sh - Gemma 3 (Gemma3ForCausalLM) against Hugging Face transformers.
#
#   gemma3_*           random-weight models built and saved by transformers itself
#                      (tools/make_gemma3_model.py): build/tools/dump_logits runs
#                      prompts longer than the sliding window in chunks of 7 mixed with
#                      other sequences' decode steps, then greedy decoding, and
#                      tests/ref/gemma3_forward.py compares every position's logits
#                      with transformers' in float64 (max error <= 1e-4 of the largest
#                      logit): F32 and BF16 checkpoints, layer_types and the older
#                      sliding_window_pattern config, linear RoPE scaling on the
#                      global layers, query_pre_attn_scalar != head_dim, final logit
#                      softcapping, untied lm_head, windows inside one KV block; the
#                      AVX2 and portable kernels too (AVX2 skipped where the CPU lacks it).
#   gemma3_batch_invariance  the same logits bit for bit whether the prompts run
#                      chunked and mixed, whole, or one token per step.
#   gemma3_engine_*    the same prompts (two sharing 150 tokens) through the engine, whose
#                      sliding groups release the blocks before their window as the
#                      prompts advance (model/kv_layout.h, engine/kv_cache_manager.h):
#                      greedy tokens equal the runner's above (which keeps every block)
#                      with requests arriving together, one after the other (the second
#                      hits 144 tokens in the prefix cache, its sliding blocks found by
#                      the window rule), in a pool so small that sequences are preempted
#                      and recomputed, and without prefix caching; the pool is empty
#                      at the end.
#   gemma3_sliding_kv_memory  a 4096-token prompt on a model shaped like Gemma 3 270M
#                      (18 layers, every sixth global, window 512, 1 KV head of 256,
#                      blocks of 16, chunks of 512): the peak and decode-time blocks in
#                      use are exactly what the window rule predicts, against keeping
#                      every block of every layer (the saving is printed).
#   gemma3_gguf_*      the same architecture as a gemma3 GGUF (tools/make_gemma3_gguf.py,
#                      llama.cpp's layout and conventions) against transformers loading
#                      that GGUF: F32 (1e-4), Q8_0 (1e-1 and top-1 at >= 85%: our 8-bit
#                      activations against transformers' F32 ones); and GGUFs that say
#                      which layers slide in the keys llama.cpp reads (sliding_window_pattern
#                      as one bool per layer with freq_base_swa 5000, or as a period 3)
#                      against transformers running the source model (1e-4), since
#                      transformers' GGUF reader ignores those keys. (llama.cpp's own
#                      converter: tests/test_hf_forward.sh.)
#   gemma3_bad_*       a checkpoint or GGUF missing a norm tensor, an unsupported
#                      config value: clear errors naming them.
#   mistral_sliding_window_*  an architecture whose sliding window we do not compute
#                      (Mistral): an explicit max_model_len beyond the window is an error
#                      naming it; by default max_model_len is capped at the window.
#   gemma3_real_*      Gemma 3 270M (scripts/fetch_models.sh gemma3) against transformers
#                      loading the same GGUF (in float32: float64 costs minutes here), on
#                      five chat-style prompts tokenized by transformers from the file, 40
#                      greedy tokens each, every position compared teacher-forced:
#                        _q4_k_m           the file as published (Q5_0, Q8_0, Q4_K, Q6_K
#                                          matrices): logits within 5e-2 of the largest,
#                                          top-1 at >= 97% of positions, greedy equal for
#                                          32 tokens or diverging at a near tie (transformers'
#                                          two logits within 5e-3 of the largest).
#                                          Why so wide: our quantized matmuls round each
#                                          activation row to 8 bits per block of 32 (as
#                                          llama.cpp does) and transformers does not, and
#                                          through 18 layers that rounding is chaotic: the
#                                          reference with the same 8-bit rounding modelled
#                                          (as hf_forward.py does) moves by a median 6e-3
#                                          and up to 2.3e-2 when its activations are
#                                          perturbed by 1e-7 relative, less than F32
#                                          rounding. So no implementation of these
#                                          activations can get closer: measured, ours is
#                                          6.6e-3 median and 2.5e-2 at worst, llama.cpp's
#                                          libllama on the same file and positions 1.0e-2
#                                          and 3.3e-2 (top-1 280/284 both); the two greedy
#                                          divergences (0.067% and 0.22% of the largest
#                                          logit) are where llama.cpp picks our token too.
#                        _dequantized_f32  every tensor dequantized to F32 by gguf-py: the
#                                          forward pass alone, within 1e-4 (measured
#                                          1.6e-6), top-1 and greedy equal everywhere.
#                      The F32 file and the prompts' ids are cached beside the model
#                      (tests/derived.sh).
#                      Skipped without the registry.
# Without .venv (torch, transformers, gguf) every check but mistral_* is skipped.
# checks: 23
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export VLLM_LOGGING_LEVEL=WARNING

real_names="gemma3_real_q4_k_m gemma3_real_dequantized_f32"
venv_names="gemma3_f32 gemma3_bf16_old_config_linear_rope gemma3_f32_softcap_untied_window5 gemma3_f32_avx2
  gemma3_f32_portable gemma3_batch_invariance gemma3_engine_equals_runner gemma3_engine_prefix_hits_sliding
  gemma3_engine_tiny_pool_preempted gemma3_engine_no_prefix_caching gemma3_sliding_kv_memory gemma3_gguf_f32
  gemma3_gguf_q8_0 gemma3_gguf_pattern_array gemma3_gguf_pattern_period3 gemma3_bad_missing_norm
  gemma3_bad_attn_softcapping gemma3_bad_layer_type gemma3_bad_gguf_missing_norm $real_names"
all_names() { echo $venv_names mistral_sliding_window_error mistral_sliding_window_capped; }
# each NAME gets one line: "skip NAME: why" / "FAIL NAME: why"
skip_all() { local why=$1; shift; for n in "$@"; do echo "skip $n: $why"; done; }
fail_all() { local why=$1; shift; for n in "$@"; do echo "FAIL $n: $why"; done; }

if [ ! -x "$build/tools/dump_logits" ]; then
  # shellcheck disable=SC2046  # names are words
  fail_all "$build/tools/dump_logits not built" $(all_names); exit 0
fi
have_venv=1
$py -c "import torch, transformers, gguf" 2>/dev/null || have_venv=0

# Prompts (ids < 320): 150 tokens (six windows of 24), 43, 2, and a repetitive one.
long=$(seq 3 2 301 | tr '\n' ' ')
mid=$(seq 3 3 120 | tr '\n' ' ')
prompts="1 ${long}7,1 ${mid}7 9,1 7,5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 200 201 202"

gen_err=""
make_model() { # dir name, make_gemma3_model flags...; on failure the reason in $gen_err
  local name=$1; shift
  $py tools/make_gemma3_model.py "$tmp/$name" "$@" > "$tmp/gen.log" 2>&1 && return 0
  gen_err="make_gemma3_model.py $*: $(tail -1 "$tmp/gen.log")"; return 1
}
make_gguf() { # hf dir, out file, make_gemma3_gguf flags...
  local dir=$1 out=$2; shift 2
  $py tools/make_gemma3_gguf.py "$dir" "$out" "$@" > "$tmp/gen.log" 2>&1 && return 0
  gen_err="make_gemma3_gguf.py $*: $(tail -1 "$tmp/gen.log")"; return 1
}
dump() { # model, out, extra dump_logits flags (default: chunks of 7 in steps of 24 tokens)...
  local model=$1 out=$2; shift 2
  [ $# -gt 0 ] || set -- --chunk 7 --budget 24
  "$build/tools/dump_logits" --model "$model" --prompts "$prompts" --decode 8 --threads 2 --out "$out" "$@" \
    2> "$tmp/dump.log" || { echo "dump_logits: $(tail -1 "$tmp/dump.log")"; return 1; }
}
compare() { # name, dump file, gemma3_forward.py arguments...: exactly one result line for name
  local name=$1 bin=$2; shift 2
  $py tests/ref/gemma3_forward.py "$@" "$bin" --name "$name" > "$tmp/cmp.out" 2> "$tmp/cmp.err"
  if grep -qE "^(ok|FAIL) $name( |:|$)" "$tmp/cmp.out"; then cat "$tmp/cmp.out"
  else echo "FAIL $name: gemma3_forward.py printed no result: $(tail -1 "$tmp/cmp.err")"; fi
}
check() { # name, model dir, gemma3_forward.py flags...
  local name=$1 dir=$2 err; shift 2
  if ! err=$(dump "$dir" "$tmp/$name.bin"); then echo "FAIL $name: $err"; return; fi
  compare "$name" "$tmp/$name.bin" "$dir" "$@"
}

if [ $have_venv = 0 ]; then
  # shellcheck disable=SC2086  # names are words
  skip_all ".venv/bin/python lacks torch/transformers/gguf (scripts/setup.sh installs them from PyPI)" $venv_names
else

# gemma3_f32 and its AVX2 and portable runs: three dumps, one transformers reference
g3_dumps=()
g3_dump() { # name, VLLM_KERNELS value or "": the dump's NAME=FILE into g3_dumps, or its FAIL line
  local name=$1 err
  if [ -n "$2" ]; then err=$(VLLM_KERNELS=$2 dump "$tmp/g3" "$tmp/$name.bin") || { echo "FAIL $name: $err"; return; }
  else err=$(dump "$tmp/g3" "$tmp/$name.bin") || { echo "FAIL $name: $err"; return; }; fi
  g3_dumps+=("$name=$tmp/$name.bin")
}
if make_model g3; then g3_dump gemma3_f32 ""; else fail_all "$gen_err" gemma3_f32; fi
if make_model g3_bf16 --dtype bf16 --layers 4 --pattern 2 --hidden-size 80 --heads 4 --kv-heads 1 --head-dim 48 \
     --old-config --rope-scaling linear:4 --seed 1; then
  check gemma3_bf16_old_config_linear_rope "$tmp/g3_bf16"
else fail_all "$gen_err" gemma3_bf16_old_config_linear_rope; fi
if make_model g3_odd --layers 5 --layer-types f,s,s,f,s --sliding-window 5 --head-dim 16 --query-pre-attn-scalar 20 \
     --final-logit-softcapping 0.5 --no-tie --seed 2; then
  check gemma3_f32_softcap_untied_window5 "$tmp/g3_odd"
else fail_all "$gen_err" gemma3_f32_softcap_untied_window5; fi
if "$build/tests/kernels_probe" avx2 2>/dev/null; then g3_dump gemma3_f32_avx2 avx2
else skip_all "no AVX2 on this machine (tests/kernels_probe)" gemma3_f32_avx2; fi
g3_dump gemma3_f32_portable portable
if [ ${#g3_dumps[@]} -gt 0 ]; then
  also=(); for d in "${g3_dumps[@]:1}"; do also+=(--also "$d"); done
  first=${g3_dumps[0]}
  $py tests/ref/gemma3_forward.py "$tmp/g3" "${first#*=}" --name "${first%%=*}" "${also[@]}" > "$tmp/cmp.out" 2> "$tmp/cmp.err"
  for d in "${g3_dumps[@]}"; do
    n=${d%%=*}
    if grep -qE "^(ok|FAIL) $n( |:|$)" "$tmp/cmp.out"; then grep -E "^(ok|FAIL) $n( |:|$)" "$tmp/cmp.out"
    else echo "FAIL $n: gemma3_forward.py printed no result: $(tail -1 "$tmp/cmp.err")"; fi
  done
fi

# batch invariance: chunked and mixed (above), whole prompts, one token per step
if [ ! -f "$tmp/gemma3_f32.bin" ]; then
  fail_all "no gemma3_f32 logits to compare with" gemma3_batch_invariance
elif ! err=$(dump "$tmp/g3" "$tmp/whole.bin" --chunk 400 --budget 400) ||
     ! err2=$(dump "$tmp/g3" "$tmp/single.bin" --chunk 1 --budget 1); then
  echo "FAIL gemma3_batch_invariance: $err ${err2:-}"
elif cmp -s "$tmp/gemma3_f32.bin" "$tmp/whole.bin" && cmp -s "$tmp/gemma3_f32.bin" "$tmp/single.bin"; then
  echo "ok gemma3_batch_invariance  # chunks of 7 mixed with decodes, whole prompts, 1 token per step: same bits"
else
  echo "FAIL gemma3_batch_invariance: the logits differ between chunkings"
fi

# the engine against the runner (bit for bit: batch invariance), sliding blocks released
engine_names="gemma3_engine_equals_runner gemma3_engine_prefix_hits_sliding gemma3_engine_tiny_pool_preempted
  gemma3_engine_no_prefix_caching"
eprompts="1 ${long}7,1 ${long}9 9,1 ${mid}7 9,1 7,5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 200 201 202"
if [ ! -d "$tmp/g3" ]; then
  # shellcheck disable=SC2086
  fail_all "no gemma3_f32 model" $engine_names
elif ! "$build/tools/dump_logits" --model "$tmp/g3" --prompts "$eprompts" --decode 8 --chunk 7 --budget 24 --threads 2 \
       --print-greedy > "$tmp/runner.txt" 2> "$tmp/dump.log"; then
  # shellcheck disable=SC2086
  fail_all "dump_logits: $(tail -1 "$tmp/dump.log")" $engine_names
else
  engine_check() { # name, extra dump_logits --engine flags, minimum prefix-cache hit tokens
    local name=$1 flags=$2 min_hits=$3
    # shellcheck disable=SC2086  # flags are words
    if ! "$build/tools/dump_logits" --engine --model "$tmp/g3" --prompts "$eprompts" --decode 8 --chunk 7 --budget 24 \
         --threads 2 --max-model-len 200 $flags > "$tmp/engine.txt" 2> "$tmp/engine.log"; then
      echo "FAIL $name: $(tail -1 "$tmp/engine.log")"; return
    fi
    local kv hits total free
    kv=$(grep '^kv:' "$tmp/engine.log")
    hits=$(sed -n 's/.*prefix cache hits \([0-9]*\) .*/\1/p' <<<"$kv")
    total=$(sed -n 's/^kv: peak [0-9]* blocks in use of \([0-9]*\),.*/\1/p' <<<"$kv")
    free=$(sed -n 's/.*, \([0-9]*\) free at the end.*/\1/p' <<<"$kv")
    if ! cmp -s "$tmp/runner.txt" "$tmp/engine.txt"; then
      echo "FAIL $name: the engine's greedy tokens differ from the runner's: $(diff "$tmp/runner.txt" "$tmp/engine.txt" | head -3 | cut -c1-120)"
    elif [ "${hits:-0}" -lt "$min_hits" ] || [ "$free" != "$total" ]; then
      echo "FAIL $name: $kv (want >= $min_hits hit tokens and every block free at the end)"
    else
      echo "ok $name  # ${kv#kv: }"
    fi
  }
  engine_check gemma3_engine_equals_runner "" 0
  engine_check gemma3_engine_prefix_hits_sliding "--gap 40" 144
  engine_check gemma3_engine_tiny_pool_preempted "--gap 3 --num-blocks 24" 0
  engine_check gemma3_engine_no_prefix_caching "--no-prefix-caching" 0
fi

# the KV memory a 4096-token prompt takes on Gemma 3 270M's layer layout
if ! make_model g270 --layers 18 --pattern 6 --hidden-size 64 --intermediate-size 64 --heads 1 --kv-heads 1 \
     --head-dim 256 --sliding-window 512 --max-pos 32768 --seed 4; then
  fail_all "$gen_err" gemma3_sliding_kv_memory
else
  p4k=$(for i in $(seq 1 4096); do printf '%d ' $(( (i * 7) % 317 + 2 )); done)
  if ! "$build/tools/dump_logits" --engine --model "$tmp/g270" --prompts "$p4k" --decode 4 --chunk 512 --budget 512 \
       --threads 2 --max-model-len 4200 > /dev/null 2> "$tmp/engine.log"; then
    echo "FAIL gemma3_sliding_kv_memory: $(tail -1 "$tmp/engine.log")"
  else
    kv=$(grep '^kv:' "$tmp/engine.log")
    peak=$(sed -n 's/^kv: peak \([0-9]*\) .*/\1/p' <<<"$kv")
    last=$(sed -n 's/.*, \([0-9]*\) at the last step.*/\1/p' <<<"$kv")
    bytes=$(sed -n 's/.*per block, \([0-9]*\) bytes per block.*/\1/p' <<<"$kv")
    # 1 full group + 5 sliding groups of 3 layers. Peak: the last prefill chunk (positions
    # 3584..4095) holds 256 full blocks and, per sliding group, blocks from that of position
    # 3584 - 511 on: 256 - 192 = 64. Decoding position 4098 (the last step before the request
    # ends): 257 full blocks, 257 - (4098 - 511) / 16 = 33 per sliding group.
    want_peak=$((256 + 5 * (256 - (3584 - 511) / 16))) want_last=$((257 + 5 * (257 - (4098 - 511) / 16)))
    kept=$(( (4100 + 15) / 16 * 18 * bytes / 3 ))  # every block of all 18 layers for 4100 tokens
    if [ "$peak" != "$want_peak" ] || [ "$last" != "$want_last" ]; then
      echo "FAIL gemma3_sliding_kv_memory: $kv (want peak $want_peak, $want_last when decoding)"
    else
      mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
      pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f%%", 100 * (1 - a / b) }'; }
      echo "ok gemma3_sliding_kv_memory  # 4096-token prompt, chunks of 512: peak $peak blocks x $bytes B =" \
           "$(mib $((peak * bytes))), decoding $last blocks = $(mib $((last * bytes))); every block kept:" \
           "$(mib "$kept"); saved $(pct $((peak * bytes)) "$kept") at the peak, $(pct $((last * bytes)) "$kept") decoding"
    fi
  fi
fi

# GGUF: what llama.cpp's gemma3 loader assumes without keys (pattern 6, local base 10000,
# attention scale 1/sqrt(head_dim)), against transformers reading the file
if ! make_model g3p6 --layers 7 --pattern 6 --head-dim 256 --heads 2 --kv-heads 1 --sliding-window 20 --seed 3; then
  fail_all "$gen_err" gemma3_gguf_f32 gemma3_gguf_q8_0
else
  for type in f32 q8_0; do
    name=gemma3_gguf_$type
    if ! make_gguf "$tmp/g3p6" "$tmp/g3p6_$type.gguf" --type $type; then echo "FAIL $name: $gen_err"; continue; fi
    if ! err=$(dump "$tmp/g3p6_$type.gguf" "$tmp/$name.bin"); then echo "FAIL $name: $err"; continue; fi
    tol=1e-4; top1=1; [ $type = q8_0 ] && tol=1e-1 && top1=0.85
    compare "$name" "$tmp/$name.bin" "$tmp" --gguf "g3p6_$type.gguf" --tol $tol --top1 $top1
  done
fi
# the layer kinds and local base in llama.cpp's keys, against the source model
pattern_check() { # name, model dir, --pattern-key value
  local name=$1 dir=$2 key=$3 err
  if ! make_gguf "$dir" "$tmp/$name.gguf" --pattern-key "$key"; then echo "FAIL $name: $gen_err"; return; fi
  if ! err=$(dump "$tmp/$name.gguf" "$tmp/$name.bin"); then echo "FAIL $name: $err"; return; fi
  compare "$name" "$tmp/$name.bin" "$dir"
}
if make_model g3_kinds --layers 5 --layer-types f,s,s,f,s --sliding-window 5 --head-dim 16 --rope-local-theta 5000 \
     --seed 5; then
  pattern_check gemma3_gguf_pattern_array "$tmp/g3_kinds" array
else fail_all "$gen_err" gemma3_gguf_pattern_array; fi
if [ -d "$tmp/g3" ]; then pattern_check gemma3_gguf_pattern_period3 "$tmp/g3" 3
else fail_all "no gemma3_f32 model" gemma3_gguf_pattern_period3; fi

# bad files
bad() { # name, model, patterns the error must name...
  local name=$1 model=$2; shift 2
  if "$build/tools/dump_logits" --model "$model" --prompts "1 2" --out "$tmp/bad.bin" 2> "$tmp/bad.log"; then
    echo "FAIL $name: loaded"; return
  fi
  for p in "$@"; do
    grep -q -- "$p" "$tmp/bad.log" || { echo "FAIL $name: no '$p' in: $(tail -1 "$tmp/bad.log")"; return; }
  done
  echo "ok $name  # $(tail -1 "$tmp/bad.log" | sed 's/^dump_logits: //')"
}
if [ ! -d "$tmp/g3" ]; then
  fail_all "no gemma3_f32 model" gemma3_bad_missing_norm gemma3_bad_attn_softcapping gemma3_bad_layer_type
else
  cp -r "$tmp/g3" "$tmp/g3_nonorm"
  $py - "$tmp/g3_nonorm/model.safetensors" <<'PY'
import sys
from safetensors.torch import load_file, save_file
w = load_file(sys.argv[1]); del w["model.layers.1.post_feedforward_layernorm.weight"]
save_file(w, sys.argv[1], metadata={"format": "pt"})
PY
  bad gemma3_bad_missing_norm "$tmp/g3_nonorm" "model.layers.1.post_feedforward_layernorm.weight" missing
  cp -r "$tmp/g3" "$tmp/g3_softcap"
  sed -i 's/"attn_logit_softcapping": null/"attn_logit_softcapping": 50.0/' "$tmp/g3_softcap/config.json"
  bad gemma3_bad_attn_softcapping "$tmp/g3_softcap" attn_logit_softcapping "not supported"
  cp -r "$tmp/g3" "$tmp/g3_types"
  sed -i '0,/"sliding_attention",/s//"chunked_attention",/' "$tmp/g3_types/config.json"
  bad gemma3_bad_layer_type "$tmp/g3_types" 'layer_types\[0\]' chunked_attention
fi
if [ ! -d "$tmp/g3p6" ]; then
  fail_all "no source model" gemma3_bad_gguf_missing_norm
elif ! make_gguf "$tmp/g3p6" "$tmp/nonorm.gguf" --drop blk.2.post_ffw_norm.weight; then
  fail_all "$gen_err" gemma3_bad_gguf_missing_norm
else
  bad gemma3_bad_gguf_missing_norm "$tmp/nonorm.gguf" "blk.2.post_ffw_norm.weight" missing
fi

# the real model
real_check() { # name, dir, file, prompt ids (comma-separated sequences), prompt lengths, gemma3_forward.py flags...
  local name=$1 dir=$2 file=$3 ids=$4 lens=$5 err
  shift 5
  if ! err=$("$build/tools/dump_logits" --model "$dir/$file" --prompts "$ids" --decode 40 --chunk 7 --budget 24 \
             --threads 2 --out "$tmp/real.bin" 2>&1 >/dev/null); then
    echo "FAIL $name: dump_logits: $(echo "$err" | tail -1)"; return
  fi
  compare "$name" "$tmp/real.bin" "$dir" --gguf "$file" --f32 --greedy 32 --prompt-lens "$lens" "$@"
}
gguf=$(scripts/fetch_models.sh gemma3 2>"$tmp/fetch.log")
rc=$?
if [ $rc -eq 3 ]; then
  # shellcheck disable=SC2086
  skip_all "the registry is unreachable ($(tail -1 "$tmp/fetch.log"))" $real_names
elif [ $rc -ne 0 ] || [ ! -s "$gguf" ]; then
  # shellcheck disable=SC2086
  fail_all "scripts/fetch_models.sh gemma3: $(tail -1 "$tmp/fetch.log")" $real_names
else
  # derived files, cached beside the model (tests/derived.sh): the prompts' ids and the F32 retyping
  if ! ids=$(tests/derived.sh gemma3-prompts "$gguf" 2> "$tmp/tok.log"); then
    # shellcheck disable=SC2086
    fail_all "tokenizing the prompts: $(tail -1 "$tmp/tok.log")" $real_names
  else
    prompt_ids=$(sed -n 1p "$ids"); lens=$(sed -n 2p "$ids")
    real_check gemma3_real_q4_k_m "$(dirname "$gguf")" "$(basename "$gguf")" "$prompt_ids" "$lens" --tol 5e-2 \
      --top1 0.97 --near-tie 5e-3
    if f32=$(tests/derived.sh gemma3-retyped "$gguf" 2> "$tmp/gen.log"); then
      real_check gemma3_real_dequantized_f32 "$(dirname "$f32")" "$(basename "$f32")" "$prompt_ids" "$lens" --tol 1e-4 --top1 1
    else
      echo "FAIL gemma3_real_dequantized_f32: retyping: $(tail -1 "$tmp/gen.log")"
    fi
  fi
fi
fi  # have_venv

# a sliding window we do not implement (tools/make_random_model.py: the Debian python's numpy)
if /usr/bin/python3 tools/make_random_model.py "$tmp/mistral" --arch mistral --dtype f32 --kv-heads 2 \
     --sliding-window 16 > "$tmp/gen.log" 2>&1; then
  if "$build/tools/dump_logits" --engine --model "$tmp/mistral" --prompts "1 2 3" --max-model-len 64 \
       > /dev/null 2> "$tmp/m.log"; then
    echo "FAIL mistral_sliding_window_error: max_model_len 64 > window 16 accepted"
  elif grep -q "max_model_len 64 exceeds the sliding_window 16 of MistralForCausalLM.*not implemented" "$tmp/m.log"; then
    echo "ok mistral_sliding_window_error  # $(grep -o 'max_model_len 64 exceeds.*' "$tmp/m.log" | head -1)"
  else
    echo "FAIL mistral_sliding_window_error: $(tail -1 "$tmp/m.log")"
  fi
  if "$build/tools/dump_logits" --engine --model "$tmp/mistral" --prompts "1 2 3" --decode 3 > /dev/null \
       2> "$tmp/m.log" && grep -q "capped to the model's sliding_window 16" "$tmp/m.log"; then
    echo "ok mistral_sliding_window_capped"
  else
    echo "FAIL mistral_sliding_window_capped: $(tail -1 "$tmp/m.log")"
  fi
else
  fail_all "make_random_model.py: $(tail -1 "$tmp/gen.log")" mistral_sliding_window_error mistral_sliding_window_capped
fi
