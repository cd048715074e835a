#!/bin/bash
# The GPU measurements of docs/notes/scale.md in one call (a lent machine's time is short: every part has its own
# time limit, and a part that fails does not stop the next). Run from the repository root on a machine with a
# CUDA GPU and this project's dependencies; output under ${OUT:-gpu-scale}/.
#   1. tests/test_cuda.py: every defense trains on CUDA as on the CPU.
#   2. the ResNet-18 benchmark (tests/test_resnet_benchmarks.py) on the GPU: CIFAR-10 inputs, batch 64 and 256.
#   3. the same at suites/fashion-mnist-full.toml's inputs (1 x 28 x 28) and batch sizes, per method: the
#      per-step costs its expected one-GPU time is derived from.
set -u
OUT=${OUT:-gpu-scale}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 RESNET_BENCH_DEVICE=cuda
PYTEST="python3 -m pytest -p no:cacheprovider -s -q"
BENCH="$PYTEST -m slow tests/test_resnet_benchmarks.py -k resnet18_dp_step_vs_nonprivate"
part() {  # part NAME SECONDS COMMAND...: run COMMAND under a time limit, log to $OUT/NAME.log
    local name=$1 limit=$2; shift 2
    echo "== $name (limit ${limit}s) $(date -u +%T)"
    local start=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "   rc=$? in $((SECONDS - start)) s"
    grep -E "^  [a-z-]+ +batch|passed|failed|Error" "$OUT/$name.log" | tail -20
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
part cuda-fit 100 $PYTEST tests/test_cuda.py
part bench-cifar 180 env RESNET_BENCH_BATCHES=64,256 $BENCH
part bench-fm-gcl 45 env RESNET_BENCH_INPUT=1x28 RESNET_BENCH_BATCHES=2048 RESNET_BENCH_METHODS=dp-gcl $BENCH
part bench-fm-512 45 env RESNET_BENCH_INPUT=1x28 RESNET_BENCH_BATCHES=512 RESNET_BENCH_METHODS=dp-clip,opacus-dpsgd,dp-fedemb $BENCH
part bench-fm-dpcl 30 env RESNET_BENCH_INPUT=1x28 RESNET_BENCH_BATCHES=128 RESNET_BENCH_METHODS=dpcl-simclr $BENCH
part bench-fm-dpsgd 45 env RESNET_BENCH_INPUT=1x28 RESNET_BENCH_BATCHES=256 RESNET_BENCH_METHODS=dpsgd $BENCH
part bench-fm-logit 75 env RESNET_BENCH_WARMUP=0 RESNET_BENCH_INPUT=1x28 RESNET_BENCH_BATCHES=1000 RESNET_BENCH_METHODS=logit-dp $BENCH
nvidia-smi --query-gpu=memory.used --format=csv,noheader
