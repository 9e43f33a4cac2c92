#!/usr/bin/env bash
# Puts the PyPI source package of llama-cpp-python (which vendors llama.cpp: its sources, its
# vocabulary-only test GGUFs with their .inp / .out pairs, its chat templates) in the cache
# outside the repository, unpacked, and prints its directory on the last line. A second run with
# the sources present only prints it. PyPI is the one registry these machines reach.
#
#   bash scripts/fetch-llama-sdist.sh     # env: LLAMA_CPP_PYTHON_VERSION (0.3.36), XDG_CACHE_HOME
set -euo pipefail
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
root="${XDG_CACHE_HOME:-$HOME/.cache}/ctxpar/llama.cpp"
src="$root/llama-cpp-python-$version"

if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
  mkdir -p "$root"
  dl="$root/download-$version.$$"
  rm -rf "$dl"
  mkdir -p "$dl"
  trap 'rm -rf "$dl"' EXIT
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$dl" \
    "llama-cpp-python==$version" >&2
  tar -xzf "$dl"/llama_cpp_python-"$version".tar.gz -C "$dl"
  rm -rf "$src"
  mv "$dl/llama_cpp_python-$version" "$src"
fi
echo "$src"
