#!/usr/bin/env bash
# test_real_models.sh - the real trained models (issue 17) against llama.cpp and
# Hugging Face transformers running the same GGUF files: SmolLM2-135M-Instruct
# (Llama, Q4_1 with a Q8_0 embedding) and Gemma 3 270M (Q4_K_M: Q5_0, Q4_K,
# Q6_K, Q8_0), fetched by package name (scripts/fetch_models.sh).
#
# checks: 14
#
# Seven results per model M (smollm2, gemma3):
#   llamacpp_ppl_M       perplexity within 0.5% of llama.cpp's, on the published file
#   llamacpp_top1_M      teacher-forced top-1 agreement with llama.cpp >= 99% at every
#                        position where llama.cpp's top-2 logit margin is >= 0.5 (the
#                        agreement over all positions is printed)
#   llamacpp_f32_ppl_M   the same on the file's F32 copy: within 0.5%
#   llamacpp_f32_top1_M  F32 copy: top-1 agreement >= 99% of all positions
#   hf_logits_M          published file: our logits within 0.15 x max |logit| of
#                        transformers' at every position of 6 chat prompts plus our 32
#                        greedy tokens (the greedy agreement is printed)
#   hf_f32_logits_M      F32 copy: within 1e-4 x max |logit|
#   hf_f32_greedy_M      F32 copy: our 32 greedy tokens are transformers' on all 6 prompts
#
# llama.cpp: the prebuilt libllama/libggml of the node-llama-cpp npm package
# (bench/llamacpp/build.sh --fetch: no compiling llama.cpp; its CPU backend is
# the best variant for this CPU), driven by tests/ref/llamacpp_score.c, against
# our build/tools/score: llama-perplexity's scheme (chunks of CTX = 1024 tokens
# from an empty cache, BOS first when the vocabulary adds one, the second half
# of each chunk scored). 1024 rather than llama-perplexity's default 512 so that
# Gemma's sliding-window layers (window 512) mask the start of every scored
# position's context. Text: llama.cpp's docs/build.md from that npm package
# (pinned by bench/llamacpp/build.sh, prose, lists, shell and CMake), tokenized by
# us, the same ids to both: its first 8192 tokens for the published files (4088
# scored positions), 2048 for the F32 copies.
#
# transformers: tests/ref/real_models_ref.py loads the published file
# (from_pretrained(gguf_file=...): gguf-py dequantizes every tensor), runs each
# whole sequence in float64 with eager attention, and compares it with
# build/tools/dump_logits on the same ids; our greedy tokens come from
# `vllmc generate` (the engine and sampler, greedy, ignore_eos) on the prompts
# transformers rendered with the model's chat template (Gemma's file has none:
# examples/template_gemma.jinja, as `vllmc serve gemma3` uses). Teacher-forced
# on our tokens, transformers' argmax is its own greedy continuation up to the
# first difference. Our KV cache holds F32 in every row (generate's
# --kv-cache-dtype float32; dump_logits' and score's default), as
# transformers' float64 does not round keys and values; `auto` would store
# float16 (SmolLM2) or bfloat16 (Gemma), another rounding, which
# tests/test_kv_dtype*.sh check. llama.cpp keeps its default F16 cache.
#
# Why two files per model. Our quantized matmuls round each activation row to
# 8 bits per 32-element block, as llama.cpp's do (Q8_0/Q8_1; Q8_K, per 256, for
# its K-quants), while transformers multiplies the dequantized weights by
# unrounded activations. In these deep, small models with outlier activations
# the rounding is chaotic: transformers itself, with our activation
# quantization modelled, differs by 5.3e-2 x max |logit| between float32 and
# float64, and by 9.1e-2 when the quantizer's inputs move by 1e-6 (SmolLM2), so
# no two implementations that are not bit-identical agree closely, and
# near-ties flip:
#   - llama.cpp against itself (its AVX-512 "zen4" CPU backend against its AVX2
#     "haswell" one, same file, same text) agrees on 96.7% of the top-1s
#     (SmolLM2; differences up to a margin of 0.41) and 94.6% (Gemma; up to
#     0.89); at margins >= 0.5 on 100% / 99.87%. Ours against llama.cpp:
#     96.3% / 94.9% overall (up to 0.46 / 1.88), 100% / 99.84% at >= 0.5; at
#     the 1.88 one, transformers sides with us (margin 0.96 for our token). The
#     issue's ">= 99% of positions" is out of reach of llama.cpp itself on these
#     files, so it is checked where it is decidable: at margins >= 0.5, and over
#     all positions on the F32 copies (measured 100% / 100%: no 8-bit rounding).
#   - Greedy continuations over 32 tokens of the published files leave
#     transformers' at near-ties: SmolLM2 on 5 of 6 prompts, at transformers
#     margins 0.012-0.442 (llama.cpp's two builds differ at margins up to 0.41),
#     Gemma on 2 of 6 (0.065, 0.211). Modelling our 8-bit activations inside
#     transformers does not remove them (it flips too, elsewhere). The engine
#     has no F32-activation mode for quantized weights; the F32 copy is that
#     comparison: the same weights (gguf-py's dequantization, which is what
#     transformers runs), F32 activations on both sides, where every prompt's
#     32 tokens must be equal and the logits agree to ~1e-6 (tolerance 1e-4).
#   - Perplexity: the 8-bit noise moves each position's -log p by ~0.11-0.14
#     (s.d.), so over n scored positions the perplexity ratio wanders by about
#     0.12/sqrt(n): 0.34% at the 1020 positions a 2,000-token text gives, too
#     close to 0.5% (llama.cpp's own two builds differ by 0.22-0.31%); hence 8192
#     tokens (4088 positions). Measured: SmolLM2 ours 11.164, llama.cpp 11.150
#     (+0.13%), its AVX2 build 11.184; Gemma ours 13.899, llama.cpp 13.938
#     (-0.28%), AVX2 13.942; transformers' unrounded perplexity sits between
#     (Gemma, 4096 tokens: ours -0.16%, llama.cpp +0.24%, its AVX2 build +0.55%).
# The published files' logits tolerance, 0.15 x max |logit|, is above that
# transformers-only spread (measured: ours 5.4e-2 SmolLM2, 2.5e-2 Gemma); a
# wrong dequantization moves logits by O(1). A small error in the forward pass
# hides under the 8-bit noise; the F32 copy's 1e-4 is what catches it
# (dropping RMSNorm's epsilon: 9.2e-4 there, nothing visible on the published
# file).
#
# Derived files (cached beside the models, keyed by the published file's
# sha256): the F32 copy (tests/ref/real_models_ref.py dequantize). llama.cpp's
# scores are cached there too, keyed by everything they depend on (the model,
# the ids, CTX, the prebuilt libraries, tests/ref/llamacpp_score.c and this
# CPU's flags), so the sanitizer run of `make test` reuses the release run's.
#
# Skipped, never passed: every row of a model when the registry is unreachable
# (fetch_models.sh exit 3); the llama.cpp rows when npm cannot provide
# llama.cpp, and under a sanitizer (build-san: scoring the 10,240 tokens of
# one model takes 8-19x the release build's time there, 5 min for SmolLM2
# against 31 s; the release build's run compares them, the transformers rows
# still run our engine on both files under the sanitizer); the transformers and F32 rows without .venv
# (scripts/setup.sh).
# A model's rows also skip when, and only when, the loader's error says its
# architecture is not supported (Gemma 3 on a build without it, as before the
# gemma3 branch's merge). Wall time on this project's shared 2-core machine (load 2.5-3
# from other work), both models: 4m15 the first time (llama.cpp scoring 20,480
# tokens; making the F32 copies adds ~30 s once), 2m25 with llama.cpp's scores
# cached (our scoring, transformers loading each GGUF in float64); SmolLM2's
# transformers rows under build-san: 65 s.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
vllmc=${VLLMC:-$PWD/$build/vllmc}
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export VLLM_LOGGING_LEVEL=WARNING
threads=2
ctx=1024
text_tokens=8192 f32_tokens=2048
margin_min=0.5 top1_min=0.99 ppl_tol=0.005
rows=(llamacpp_ppl llamacpp_top1 llamacpp_f32_ppl llamacpp_f32_top1 hf_logits hf_f32_logits hf_f32_greedy)

say() { # verdict row model why...  (one result line)
  local v=$1 row=$2 m=$3; shift 3
  case $v in ok) echo "ok ${row}_$m${*:+  # $*}" ;; *) echo "$v ${row}_$m: $*" ;; esac
}
say_rows() { # verdict model why row...  (the same line for several rows)
  local v=$1 m=$2 why=$3 r; shift 3
  for r in "$@"; do say "$v" "$r" "$m" "$why"; done
}

for t in score dump_logits; do
  [ -x "$build/tools/$t" ] || { for m in smollm2 gemma3; do say_rows FAIL $m "$build/tools/$t not built" "${rows[@]}"; done; exit 0; }
done

have_py=1
$py -c "import torch, transformers, gguf" 2>/dev/null || have_py=0

# llama.cpp: the npm package's prebuilt libraries and its source's headers
llama="" llama_why=""
if [[ "$build" == *build-san* || "$build" == *build-tsan* ]]; then
  llama_why="not run under a sanitizer (10,240 tokens per model through instrumented kernels: 8-19x the release time); the release build's run compares them"
elif ! bench/llamacpp/build.sh --fetch > "$tmp/npm.log" 2>&1; then
  llama_why="llama.cpp's npm package cannot be fetched ($(tail -1 "$tmp/npm.log"))"
else
  lc=$PWD/bench/llamacpp/.cache
  if cc -O2 -std=c11 -D_GNU_SOURCE -I"$lc/src/include" -I"$lc/src/ggml/include" tests/ref/llamacpp_score.c \
       -o "$tmp/llamacpp_score" "$lc/bins/libllama.v0.5.0.so" "$lc/bins/libggml.v0.5.0.so" "$lc/bins/libggml-base.so" \
       -Wl,-rpath,"$lc/bins" -lm 2> "$tmp/cc.log"; then
    llama=$tmp/llamacpp_score
  else
    llama_why="FAIL: tests/ref/llamacpp_score.c does not build against the prebuilt libllama: $(head -1 "$tmp/cc.log")"
  fi
fi

# A scoring run's key: sha256 of the files and values its result depends on
llama_key() { # model ids ctx
  { sha256sum "$1" "$2" tests/ref/llamacpp_score.c "$lc"/bins/*.so | cut -d' ' -f1
    echo "$3 $threads"; grep -m1 '^flags' /proc/cpuinfo; } | sha256sum | cut -c1-24
}
llama_score() { # model ids out: llama.cpp's scores, from the cache when the key matches
  local key cached
  key=$(llama_key "$1" "$2" $ctx)
  cached=$derived/llamacpp-score-$key.txt
  if [ ! -s "$cached" ]; then
    "$llama" "$lc/bins" "$1" "$2" $ctx $threads > "$cached.tmp" 2> "$tmp/llama.err" || { rm -f "$cached.tmp"; return 1; }
    mv "$cached.tmp" "$cached"
  fi
  cp "$cached" "$3"
}

# compare THEIRS OURS: "ppl_theirs ppl_ours n agree n_decided agree_decided max_margin_at_a_flip"
compare_scores() {
  paste "$1" "$2" | awk -v tau=$margin_min '
    $1 == "ppl" { pt = $2; po = $4; next }
    NF == 8 && $1 == $5 { n++; a += $2 == $6; if ($4 >= tau) { nd++; ad += $2 == $6 }
                          if ($2 != $6) { nf++; if ($4 > mf) mf = $4 }; next }
    { bad = 1 }
    END { if (bad || !n) print "mismatch"; else printf "%s %s %d %d %d %d %s\n", pt, po, n, a, nd, ad, nf ? sprintf("%.3f", mf) : "none" }'
}

# llamacpp rows for one file: model ids name-prefix (llamacpp / llamacpp_f32) bos-flag
llama_rows() {
  local file=$1 ids=$2 pre=$3 bos=${4:-} r
  if ! "$build/tools/score" --model "$file" --ids "$ids" --ctx $ctx --threads $threads $bos > "$tmp/ours.txt" 2> "$tmp/ours.err"; then
    say_rows FAIL $m "tools/score: $(tail -1 "$tmp/ours.err")" ${pre}_ppl ${pre}_top1; return
  fi
  if ! llama_score "$file" "$ids" "$tmp/theirs.txt"; then
    say_rows FAIL $m "llamacpp_score: $(tail -1 "$tmp/llama.err")" ${pre}_ppl ${pre}_top1; return
  fi
  r=$(compare_scores "$tmp/theirs.txt" "$tmp/ours.txt")
  if [ "$r" = mismatch ]; then
    say_rows FAIL $m "the two scorers' outputs do not line up (positions or ppl lines)" ${pre}_ppl ${pre}_top1; return
  fi
  read -r pt po n a nd ad mf <<< "$r"
  local rel v all dec
  rel=$(awk -v a="$po" -v b="$pt" 'BEGIN { printf "%+.3f", (a / b - 1) * 100 }')
  v=$(awk -v a="$po" -v b="$pt" -v t=$ppl_tol 'BEGIN { d = a / b - 1; print (d <= t && d >= -t) ? "ok" : "FAIL" }')
  say $v ${pre}_ppl $m "perplexity ours $po, llama.cpp $pt ($rel%, tolerance 0.5%), $n positions of $(wc -w < "$ids") tokens"
  all=$(awk -v a=$a -v n=$n 'BEGIN { printf "%.2f%%", 100 * a / n }')
  if [ $pre = llamacpp ]; then
    dec=$(awk -v a=$ad -v n=$nd 'BEGIN { printf "%.2f%%", n ? 100 * a / n : 0 }')
    v=$(awk -v a=$ad -v n=$nd -v t=$top1_min 'BEGIN { print (n > 0 && a >= t * n) ? "ok" : "FAIL" }')
    say $v ${pre}_top1 $m "top-1 agreement $dec ($ad/$nd) where llama.cpp's margin >= $margin_min (required 99%);" \
        "$all ($a/$n) over all positions, largest llama.cpp margin at a difference $mf"
  else
    v=$(awk -v a=$a -v n=$n -v t=$top1_min 'BEGIN { print (a >= t * n) ? "ok" : "FAIL" }')
    say $v ${pre}_top1 $m "top-1 agreement $all ($a/$n positions, required 99%), largest llama.cpp margin at a difference $mf"
  fi
}

for m in smollm2 gemma3; do
  path=$(scripts/fetch_models.sh $m 2> "$tmp/fetch.err"); rc=$?
  if [ $rc -eq 3 ]; then say_rows skip $m "the model's PyPI packages cannot be downloaded" "${rows[@]}"; continue; fi
  if [ $rc -ne 0 ] || [ ! -s "$path" ]; then
    say_rows FAIL $m "scripts/fetch_models.sh $m: $(tail -1 "$tmp/fetch.err")" "${rows[@]}"; continue
  fi
  # the architecture not loaded by this build (until it lands) is the one accepted skip
  printf '2 3 4 5\n' > "$tmp/probe.ids"
  if ! "$build/tools/score" --model "$path" --ids "$tmp/probe.ids" --ctx 4 > /dev/null 2> "$tmp/probe.err"; then
    if arch=$(grep -o "general.architecture '[a-z0-9_]*' is not supported" "$tmp/probe.err"); then
      arch=${arch#*\'}; arch=${arch%%\'*}
      say_rows skip $m "architecture $arch not loaded by this build" "${rows[@]}"
    else
      say_rows FAIL $m "loading $path: $(tail -1 "$tmp/probe.err")" "${rows[@]}"
    fi
    continue
  fi
  derived=$(dirname "$path")/derived
  mkdir -p "$derived"
  sum=$(sha256sum "$path" | cut -c1-16)
  tmpl=(); [ $m = gemma3 ] && tmpl=(examples/template_gemma.jinja)

  # the F32 copy
  f32=$derived/$(basename "$path" .gguf)-f32-$sum.gguf f32_why=""
  if [ $have_py -eq 0 ]; then
    f32_why="skip: $py lacks torch/transformers/gguf (scripts/setup.sh installs them from PyPI)"
  elif [ ! -s "$f32" ]; then
    if $py tests/ref/real_models_ref.py dequantize "$path" "$f32.tmp" > "$tmp/deq.log" 2>&1; then mv "$f32.tmp" "$f32"
    else rm -f "$f32.tmp"; f32_why="FAIL: dequantizing to F32: $(tail -1 "$tmp/deq.log")"; fi
  fi

  # llama.cpp rows
  if [ -z "$llama" ]; then
    v=skip why=$llama_why
    [[ "$why" == FAIL:* ]] && v=FAIL why=${why#FAIL: }
    say_rows $v $m "$why" llamacpp_ppl llamacpp_top1 llamacpp_f32_ppl llamacpp_f32_top1
  else
    bos=(); [ "$(echo '""' | "$vllmc" tokenize --model "$path" 2>/dev/null)" != "[]" ] && bos=(--bos)
    jq -Rs . bench/llamacpp/.cache/src/docs/build.md | "$vllmc" tokenize --model "$path" > "$tmp/text.json" 2> "$tmp/tok.err"
    jq -r ".[:$text_tokens][]" "$tmp/text.json" 2>/dev/null | tr '\n' ' ' > "$tmp/text.ids"
    jq -r ".[:$f32_tokens][]" "$tmp/text.json" 2>/dev/null | tr '\n' ' ' > "$tmp/text_f32.ids"
    if [ "$(wc -w < "$tmp/text.ids")" -ne $text_tokens ]; then
      say_rows FAIL $m "the text gave $(wc -w < "$tmp/text.ids") of $text_tokens tokens: $(tail -1 "$tmp/tok.err")" \
        llamacpp_ppl llamacpp_top1 llamacpp_f32_ppl llamacpp_f32_top1
    else
      llama_rows "$path" "$tmp/text.ids" llamacpp "${bos[@]}"
      if [ -n "$f32_why" ]; then
        v=${f32_why%%: *}; say_rows $v $m "${f32_why#*: }" llamacpp_f32_ppl llamacpp_f32_top1
      else
        llama_rows "$f32" "$tmp/text_f32.ids" llamacpp_f32 "${bos[@]}"
      fi
    fi
  fi

  # transformers rows
  if [ $have_py -eq 0 ]; then
    say_rows skip $m "$py lacks torch/transformers/gguf (scripts/setup.sh installs them from PyPI)" hf_logits hf_f32_logits hf_f32_greedy
    continue
  fi
  if [ -n "$f32_why" ]; then
    v=${f32_why%%: *}; say_rows $v $m "${f32_why#*: }" hf_f32_logits hf_f32_greedy
  fi
  if ! $py tests/ref/real_models_ref.py prompts "$path" 32 "${tmpl[@]}" > "$tmp/prompts.jsonl" 2> "$tmp/ref.err"; then
    say_rows FAIL $m "rendering the chat prompts: $(tail -1 "$tmp/ref.err")" hf_logits
    [ -z "$f32_why" ] && say_rows FAIL $m "rendering the chat prompts" hf_f32_logits hf_f32_greedy
    continue
  fi
  gen_ok=1
  for v in q f; do
    file=$path; [ $v = f ] && file=$f32
    [ $v = f ] && [ -n "$f32_why" ] && { : > "$tmp/gen_f.json"; : > "$tmp/dump_f.bin"; continue; }
    if ! "$vllmc" generate --model "$file" --prompts-file "$tmp/prompts.jsonl" --json --threads $threads \
         --kv-cache-dtype float32 > "$tmp/gen_$v.json" 2> "$tmp/gen.err"; then
      echo "vllmc generate: $(tail -1 "$tmp/gen.err")" > "$tmp/gen_$v.why"; gen_ok=0; continue
    fi
    seqs=$(jq -r '(.prompt_token_ids + .outputs[0].token_ids) | map(tostring) | join(" ")' "$tmp/gen_$v.json" | paste -sd,)
    "$build/tools/dump_logits" --model "$file" --prompts "$seqs" --out "$tmp/dump_$v.bin" --threads $threads \
      2> "$tmp/dump.err" || { echo "dump_logits: $(tail -1 "$tmp/dump.err")" > "$tmp/gen_$v.why"; gen_ok=0; }
  done
  if [ $gen_ok -eq 0 ]; then
    say_rows FAIL $m "$(cat "$tmp"/gen_*.why | head -1)" hf_logits
    [ -z "$f32_why" ] && say_rows FAIL $m "$(cat "$tmp"/gen_*.why | head -1)" hf_f32_logits hf_f32_greedy
    rm -f "$tmp"/gen_*.why
    continue
  fi
  $py tests/ref/real_models_ref.py compare "$path" $m "$tmp/gen_q.json" "$tmp/dump_q.bin" "$tmp/gen_f.json" "$tmp/dump_f.bin" \
    > "$tmp/cmp.out" 2> "$tmp/cmp.err"
  if [ -n "$f32_why" ]; then grep -v '^\(ok\|FAIL\) hf_f32_' "$tmp/cmp.out"; else cat "$tmp/cmp.out"; fi
  grep -q "hf_logits_$m" "$tmp/cmp.out" || say FAIL hf_logits $m "real_models_ref.py compare: $(tail -1 "$tmp/cmp.err")"
  if [ -z "$f32_why" ]; then
    grep -q "hf_f32_logits_$m" "$tmp/cmp.out" || say FAIL hf_f32_logits $m "real_models_ref.py compare: $(tail -1 "$tmp/cmp.err")"
    grep -q "hf_f32_greedy_$m" "$tmp/cmp.out" || say FAIL hf_f32_greedy $m "real_models_ref.py compare: $(tail -1 "$tmp/cmp.err")"
  fi
done
exit 0
