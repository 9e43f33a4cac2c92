#!/usr/bin/env bash
# The Python tools of the server tests, the serving benchmark, the plan's JSON-schema test
# (jsonschema) and bench/model/decode_ceiling.py (gguf), in a virtual environment outside the repository; prints its python on the last
# line. A no-op when it is up to date.
#
#   bash scripts/install-python.sh      # env: CTXPAR_VENV (default ~/.cache/ctxpar/venv)
#
# lm-eval is installed without its dependencies: `pip install lm-eval` pulls scikit-learn,
# evaluate, rouge-score and more (no torch, but hundreds of MB) that its local-completions
# loglikelihood never imports. What that path imports is listed here: the api extra (aiohttp,
# tenacity, tqdm, requests) and the task loader's imports (datasets for local JSON data, sacrebleu,
# pytablewriter, sqlitedict, dill, word2number, more_itertools, jinja2, pyyaml, numpy).
set -euo pipefail
venv="${CTXPAR_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxpar/venv}"
packages=(openai pytest requests aiohttp matplotlib jsonschema gguf
          tenacity tqdm numpy pyyaml jinja2 dill sqlitedict more_itertools word2number
          pytablewriter sacrebleu datasets)
lm_eval="lm-eval==0.4.13"
want="${packages[*]} $lm_eval"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
if [ "$(cat "$venv/.ctxpar-packages" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$lm_eval" >&2
  echo "$want" > "$venv/.ctxpar-packages"
fi
echo "$venv/bin/python"
