#!/usr/bin/env bash
# The whole test suite from a fresh clone: installs what is missing, builds, runs CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/install-python.sh >/dev/null
export CTXPAR_MODEL="${CTXPAR_MODEL:-$(bash scripts/fetch-model.sh)}"
# Gemma 3's tests skip with a message when it cannot be fetched.
export CTXPAR_GEMMA3_MODEL="${CTXPAR_GEMMA3_MODEL:-$(bash scripts/fetch-model.sh gemma3 || true)}"
# llama.cpp's tokenizer test pairs; those tests skip with a message when it cannot be fetched.
export CTXPAR_LLAMA_SDIST="${CTXPAR_LLAMA_SDIST:-$(bash scripts/fetch-llama-sdist.sh | tail -n 1 || true)}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cmake --preset default
cmake --build --preset default
# CI shows only the end of this output: on a failure, the failed tests' own failure lines come
# last (from CTest's log, before anything else overwrites it).
if ! ctest --preset default "$@"; then
  log=build/default/Testing/Temporary/LastTest.log
  echo "== the failures, from $log:"
  grep -E '^(FAILED|ERROR) |\[  FAILED  \] [A-Za-z]|: Failure$|^Expected|^  Actual|^Which is' "$log" |
    cut -c1-300 | tail -n 10 || true
  exit 8
fi
