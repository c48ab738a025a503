#!/usr/bin/env bash
# test_kv_dtype_ref.sh - the KV cache element types (--kv-cache-dtype) against torch.
#
# checks: 5
#
# tests/ref/kv_dtype_ref.py writes what torch makes of them (every code of
# bfloat16, float16, float8_e4m3fn and float8_e5m2 as float32; ~700k float32
# values, ties and extremes included, cast to each; attention cases whose K/V
# are rounded by torch's casts, with FP8 scales, and their float64 outputs),
# then build/tests/test_kv_dtype --torch-ref checks our conversions and each
# attention path against those files:
#   torch_decode                every code, scalar and vector loads
#   torch_encode                every stored code (FP8 saturating; see kernels/kv_dtype.h)
#   torch_attention_<path>      the pool holds torch's (x / scale).to(type), and
#                               portable / avx2 / avx512 attention over it is within
#                               1e-5 (relative) of the float64 reference
# Skipped without .venv's torch (scripts/setup.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=.venv/bin/python
names="torch_decode torch_encode torch_attention_portable torch_attention_avx2 torch_attention_avx512"
each() { for n in $names; do echo "$1 $n: $2"; done; exit 0; }

$py -c "import torch, numpy" 2>/dev/null || each skip ".venv/bin/python lacks torch/numpy (run scripts/setup.sh)"
[ -x "$build/tests/test_kv_dtype" ] || each FAIL "$build/tests/test_kv_dtype not built"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$py tests/ref/kv_dtype_ref.py "$tmp" > "$tmp/gen.log" 2>&1 || each FAIL "kv_dtype_ref.py: $(tail -1 "$tmp/gen.log")"
"$build/tests/test_kv_dtype" --torch-ref "$tmp"
