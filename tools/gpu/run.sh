#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds distrl against the official LibTorch 2.x with CUDA and
# NCCL (make LIBTORCH=wheel: PyPI's torch wheel, pinned in the Makefile), runs the tests that
# need a device, then the benchmarks that use it, and prints one table. Minutes, not days:
#
#   tools/gpu/run.sh                 # everything
#   OUT=/tmp/gpu tools/gpu/run.sh    # where the logs, CSVs and the table go (default runs/gpu)
#
# Needs the CUDA 13 toolkit (CUDA_HOME, with NCCL and cuDNN) and a driver; exits 2 naming what
# is missing. The build dir is build-torch2 (ccache keeps reruns short).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/gpu}
mkdir -p "$OUT"

command -v nvidia-smi > /dev/null || { echo "tools/gpu/run.sh: no nvidia-smi: is there a GPU and a driver?" >&2; exit 2; }
[ -n "${CUDA_HOME:-}" ] || { echo "tools/gpu/run.sh: set CUDA_HOME to the CUDA 13 toolkit" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

echo "== build (LibTorch wheel, CUDA + NCCL)"
make LIBTORCH=wheel CMAKE_ARGS="-DDISTRL_CUDA=ON -DDISTRL_NCCL=ON" build 2>&1 | tail -3
B=build-torch2

echo "== tests that need a device"
# The NCCL group, CUDA tensors on the wire (refused or staged), the CUDA policy, DDP over NCCL.
(cd "$B" && ctest --output-on-failure -R 'Nccl|Cuda|Gpu|Device' 2>&1 | tee "../$OUT/ctest.log" | tail -15)

echo "== benchmarks on the device"
"$B/bin/distrl-bench" rl --observers 4,8 --set agent.device=cuda --csv "$OUT/rl.csv" --png "" > "$OUT/rl.txt" 2>&1
"$B/bin/distrl-bench" allreduce --ranks 2 --transports shm,zmq --csv "$OUT/allreduce.csv" > "$OUT/allreduce.txt" 2>&1
"$B/bin/distrl-bench" ddp --ranks 1,2 --csv "$OUT/ddp.csv" > "$OUT/ddp.txt" 2>&1

{
  echo "GPU: $(cat "$OUT/gpu.txt")"
  echo
  echo "tests:"; grep -E "tests passed|Skipped|Failed" "$OUT/ctest.log" || true
  echo
  echo "distrl-bench rl (policy on cuda):"; grep -E "^tutorial" "$OUT/rl.txt" || cat "$OUT/rl.txt"
  echo
  echo "distrl-bench allreduce:"; grep -E "^\|" "$OUT/allreduce.txt" || cat "$OUT/allreduce.txt"
  echo
  echo "distrl-bench ddp:"; grep -E "^\|" "$OUT/ddp.txt" || cat "$OUT/ddp.txt"
} | tee "$OUT/table.txt"
echo "wrote $OUT/table.txt (and the logs and CSVs beside it)"
