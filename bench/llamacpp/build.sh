#!/usr/bin/env bash
# Gets the llama.cpp peer for the side-by-side benchmarks, once, into
# bench/llamacpp/.cache (later runs reuse it and print nothing):
#   - npm pack node-llama-cpp and @node-llama-cpp/linux-x64 (the only download,
#     from the npm registry): the prebuilt libllama/libggml (bins/, used by
#     driver.c) and the llama.cpp source they were built from
#     (llama/gitRelease.bundle, cloned to src/);
#   - cmake build of llama-bench, llama-batched-bench and llama-server from that
#     source, natively for this CPU (GGML_NATIVE=ON), static, no curl/openssl,
#     no web UI download, -j2, into build/bin/. ggml's AMX backend is compiled
#     out (-U__AMX_INT8__): on Sapphire Rapids it segfaults in
#     ggml_backend_amx_mul_mat (llama.cpp issue 20824, unfixed); the AVX-512 /
#     VNNI paths stay. Rebuilt when missing or when these flags change.
# Installs the Debian packages the build needs (cmake, g++, git) if missing.
#   bench/llamacpp/build.sh          prints the bin directory on its last line
#   bench/llamacpp/build.sh --isa avx2   the same tools with AVX2+FMA+F16C only
#                                    (GGML_NATIVE off, no AVX-512), into build-avx2/:
#                                    the issue's Zen3 instruction set on a newer CPU
#   bench/llamacpp/build.sh --fetch  only the npm packages (for run.sh / driver.c)
set -euo pipefail
cd "$(dirname "$0")/../.."
ver=3.22.1
cache=$PWD/bench/llamacpp/.cache
jobs=${VLLMC_BUILD_JOBS:-2}
isa=native fetch_only=0
case "${1:-}" in
  --fetch) fetch_only=1 ;;
  --isa) isa=${2:-} ;;
  "") ;;
  *) echo "llamacpp: unknown option '$1' (--fetch, --isa native|avx2)" >&2; exit 2 ;;
esac
case "$isa" in
  native) build=$cache/build isa1=(-DGGML_NATIVE=ON)
          isa2=(-DCMAKE_C_FLAGS=-U__AMX_INT8__ -DCMAKE_CXX_FLAGS=-U__AMX_INT8__) ;;
  avx2)   build=$cache/build-avx2 isa1=(-DGGML_NATIVE=OFF)
          isa2=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
                    -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
                    -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) ;;
  *) echo "llamacpp: --isa takes native or avx2, not '$isa'" >&2; exit 2 ;;
esac
mkdir -p "$cache"

debs=(cmake g++ make git)
missing=()
for p in "${debs[@]}"; do
  command -v "$p" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "llamacpp: installing Debian packages: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# bins/ and src/ appear whole or not at all: unpacked in a directory of our own,
# renamed into place (src/ first: its presence alone means nothing), under a
# lock, so that runs at the same time (tests/run.sh's passes) fetch once
fetched() { [ -d "$cache/bins" ] && [ -f "$cache/src/CMakeLists.txt" ]; }
if ! fetched; then
  exec 9>"$cache/.fetch.lock"
  flock 9
  if ! fetched; then
    echo "llamacpp: npm pack node-llama-cpp@$ver" >&2
    part=$(mktemp -d "$cache/fetch.XXXXXX")
    trap 'rm -rf "$part"' EXIT
    (cd "$part" && npm pack --loglevel=error "node-llama-cpp@$ver" "@node-llama-cpp/linux-x64@$ver" >/dev/null)
    tar xzf "$part/node-llama-cpp-linux-x64-$ver.tgz" -C "$part" package/bins
    tar xzf "$part/node-llama-cpp-$ver.tgz" -C "$part" package/llama/gitRelease.bundle
    git clone -q "$part/package/llama/gitRelease.bundle" "$part/src" 2>/dev/null
    rm -rf "$cache/bins" "$cache/src"
    mv "$part/src" "$cache/src"
    mv "$part/package/bins/linux-x64" "$cache/bins"
    rm -rf "$part"
  fi
  exec 9>&-
fi

[ $fetch_only -eq 1 ] && exit 0

bin=$build/bin
tools=(llama-bench llama-batched-bench llama-server)
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
flags=(-DCMAKE_BUILD_TYPE=Release "${isa1[@]}" -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
       -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
       "${isa2[@]}")
need=0
for t in "${tools[@]}"; do [ -x "$bin/$t" ] || need=1; done
[ "$(cat "$build/flags" 2>/dev/null)" = "${gen[*]} ${flags[*]}" ] || need=1
if [ $need -eq 1 ]; then
  log=$build.log
  echo "llamacpp: building ${tools[*]} ($isa) from the node-llama-cpp $ver source (-j$jobs, takes a while)" >&2
  t0=$(date +%s)
  rm -rf "$build"
  cmake -S "$cache/src" -B "$build" "${gen[@]}" "${flags[@]}" >"$log" 2>&1 ||
    { tail -20 "$log" >&2; exit 1; }
  cmake --build "$build" -j "$jobs" --target "${tools[@]}" >>"$log" 2>&1 ||
    { tail -30 "$log" >&2; exit 1; }
  echo "${gen[*]} ${flags[*]}" >"$build/flags"
  echo "llamacpp: built in $(( $(date +%s) - t0 )) s (log: $log)" >&2
fi
echo "$bin"
