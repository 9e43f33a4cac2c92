#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-cli, llama-server, llama-batched-bench, llama-perplexity and
# llama-tokenize for CPU into a cache outside the repository, from the llama.cpp sources that the PyPI source
# package of llama-cpp-python vendors (PyPI is the one registry these machines reach). Prints the
# directory of the binaries on its last line; a second run with the binaries present only prints
# it.
#
#   bash bench/llama_cpp/build.sh     # env: LLAMA_CPP_PYTHON_VERSION (0.3.36), JOBS (2),
#                                     #      XDG_CACHE_HOME, LLAMA_CPU (native)
#
# LLAMA_CPU=avx2 builds for AVX2, FMA and F16C only (GGML_NATIVE off), in its own directory: the
# peer of ctxpar's AVX2 path (CTXPAR_CPU_ISA=avx2) on a CPU that has more.
#
# Flags: -march=native (GGML_NATIVE) with AMX off. -march=native turns AMX on where the CPU has
# it (Sapphire Rapids and later) and ggml's AMX path then dies with SIGILL in VMs that do not
# grant the tile state; GCC keeps an explicit -mno-amx-* over what -march implies, whatever the
# order of the flags. No CUDA, no network (curl off, no prebuilt web UI).
set -euo pipefail
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
jobs="${JOBS:-2}"
root="${XDG_CACHE_HOME:-$HOME/.cache}/ctxpar/llama.cpp"
cpu="${LLAMA_CPU:-native}"
case "$cpu" in
  native) build="$root/build-$version" ;;
  avx2) build="$root/build-$version-avx2" ;;
  *) echo "LLAMA_CPU=$cpu: expected native or avx2" >&2; exit 2 ;;
esac
bin="$build/bin"

if [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-cli" ] && [ -x "$bin/llama-server" ] &&
  [ -x "$bin/llama-batched-bench" ] && [ -x "$bin/llama-perplexity" ] && [ -x "$bin/llama-tokenize" ]; then
  echo "$bin"
  exit 0
fi

src="$(LLAMA_CPP_PYTHON_VERSION="$version" bash "$(dirname "$0")/../../scripts/fetch-llama-sdist.sh" | tail -n 1)"

no_amx=""
for f in -mno-amx-tile -mno-amx-int8 -mno-amx-bf16; do
  if echo 'int main(){}' | "${CC:-cc}" -x c -march=native "$f" -o /dev/null - 2>/dev/null; then
    no_amx="$no_amx $f"
  fi
done
arch=(-DGGML_NATIVE=ON)
if [ "$cpu" = avx2 ]; then
  arch=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
fi
cmake -S "$src/vendor/llama.cpp" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  "${arch[@]}" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
  -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" \
  -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF >&2
cmake --build "$build" -j "$jobs" --target llama-bench llama-cli llama-server \
  llama-batched-bench llama-perplexity llama-tokenize >&2
echo "$bin"
