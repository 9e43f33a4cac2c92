#!/usr/bin/env bash
# The one device script of the CUDA side (issue 5): checks every kernel on the GPU, then times
# them beside the ceilings and PyTorch measured in the same run. Under 8 minutes on an H200.
#
#   bash bench/gpu/run.sh --stage   # on a build machine (nvcc, no GPU needed): build into
#                                   # build/gpu and copy what the device needs to build/gpu-bin
#   bash bench/gpu/run.sh           # on the GPU machine: uses build/gpu-bin when it is there
#                                   # (carried), else builds (cmake preset into build/gpu, -j16)
#
# Logs to $OUT/log.txt and writes gpu_bench.json, torch_bench.json and results.json to $OUT
# (the device tool's output folder; build/gpu/out when unset). A failing step is logged and the
# script goes on, so one broken check still leaves the timings; the exit status is 1 when any
# step failed. The table printed last is report.py's. Each step has a timeout; together they stay
# under 9 minutes even if every step hangs (a normal run takes a few minutes).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build/gpu
BIN=$ROOT/build/gpu-bin
JOBS=${JOBS:-16}
TARGETS=(ctxpar_gpu_bench cuda_attention_test cuda_combine_test cuda_nccl_communicator_test
         cuda_ipc_exchange_test ctxpar)
cd "$ROOT"

build() {
  cmake --preset default -B "$BUILD" -DCTXPAR_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a
  # The CLI (for `ctxpar check`) is built apart: a broken subsystem elsewhere must not stop the
  # CUDA checks.
  cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]:0:5}"
  cmake --build "$BUILD" -j "$JOBS" --target ctxpar || echo "warning: the ctxpar CLI did not build"
}

stage() {
  rm -rf "$BIN"
  mkdir -p "$BIN/lib"
  cp "$BUILD/bench/gpu/ctxpar_gpu_bench" "$BUILD"/tests/cuda/cuda_*_test "$BIN/"
  if [[ -x $BUILD/cli/ctxpar ]]; then cp "$BUILD/cli/ctxpar" "$BIN/"; fi
  # libfmt is the one shared library of the build machine that the CUDA image may lack.
  for exe in "$BIN"/*; do
    [[ -f $exe ]] || continue
    ldd "$exe" | awk '/libfmt/ {print $3}' | xargs -r -I{} cp -L {} "$BIN/lib/"
  done
  du -sh "$BIN"
}

if [[ ${1:-} == --stage ]]; then
  JOBS=${JOBS_STAGE:-2}
  build
  stage
  exit 0
fi

OUT=${OUT:-$BUILD/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
FAILED=()
step() {
  local name=$1
  shift
  echo "== $name ($(date -u +%H:%M:%S))"
  local rc=0
  "$@" || rc=$?
  if ((rc != 0)); then
    echo "!! $name failed (exit $rc)"
    FAILED+=("$name")
  fi
}

step "device" nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
  --format=csv
if [[ ! -x $BIN/ctxpar_gpu_bench ]]; then
  step "build" build
  step "stage" stage
fi
# libfmt from the build machine; the CUDA toolkit's libraries wherever the image keeps them.
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
for exe in "$BIN"/*; do
  [[ -f $exe ]] && ldd "$exe" | grep "not found" | sed "s|^|$(basename "$exe"): |" || true
done

# Correctness: float64 references and the CPU kernel, fresh random inputs, poisoned outputs.
for t in attention combine nccl_communicator; do
  step "test $t" timeout 60 "$BIN/cuda_${t}_test" --gtest_brief=1 --gtest_color=no
done
for np in 2 4; do
  step "test ipc_exchange np$np" timeout 45 mpiexec -n "$np" "$BIN/cuda_ipc_exchange_test" \
    --gtest_brief=1 --gtest_color=no
done
# fi_a2a on a machine without MNNVL fabric: refused at init with the seed's guidance (exit 2).
if [[ -x $BIN/ctxpar ]]; then
  echo "== ctxpar check --dcp-comm-backend fi_a2a (expect exit 2, CTXPAR-DCP-006)"
  rc=0
  text=$("$BIN/ctxpar" check --tp-size 2 --dcp-size 2 --dcp-comm-backend fi_a2a 2>&1) || rc=$?
  echo "$text"
  echo "exit $rc"
  if ((rc != 2)) || [[ $text != *CTXPAR-DCP-006* ]]; then
    FAILED+=("ctxpar check fi_a2a (exit $rc; expected 2 with CTXPAR-DCP-006)")
  fi
fi

# Timings.
step "ctxpar_gpu_bench" timeout 150 "$BIN/ctxpar_gpu_bench" --json "$OUT/gpu_bench.json"
step "torch_bench" timeout 120 python3 bench/gpu/torch_bench.py --json "$OUT/torch_bench.json"
step "report" python3 bench/gpu/report.py "$OUT/gpu_bench.json" "$OUT/torch_bench.json" \
  "$OUT/results.json"

if ((${#FAILED[@]} > 0)); then
  printf 'FAILED: %s\n' "${FAILED[@]}"
  exit 1
fi
echo "all steps passed"
