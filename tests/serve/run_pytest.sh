#!/usr/bin/env bash
# Runs one pytest file of the server suite with the venv of scripts/install-python.sh.
#   run_pytest.sh CTXPAR_BIN TEST_FILE
set -euo pipefail
venv="${CTXPAR_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxpar/venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "no Python venv at $venv: run bash scripts/install-python.sh (scripts/test.sh does)" >&2
  exit 1
fi
export CTXPAR_BIN="$1"
# Wide enough that pytest's summary lines (-rfEs) carry the failure's message whole.
export COLUMNS=300
cd "$(dirname "$0")"
exec "$venv/bin/python" -m pytest -q -rfEs -p no:cacheprovider "$2"
