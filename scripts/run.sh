#!/usr/bin/env bash
# The main job from a fresh clone: installs what is missing, builds, and runs ctxpar on the
# embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target ctxpar
build/default/cli/ctxpar check --tp-size 4 --dcp-size 4 --dcp-comm-backend a2a --dcp-replicate-q-proj
