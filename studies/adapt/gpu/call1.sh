#!/usr/bin/env bash
# call 1: keep part 1 of the weights, the model files and the data in /tmp/g for call 2 (a later call's tree no longer
# holds what this call carried), install, then benchmarks/gpu.py alone on the GPU (its timings want the GPU to themselves)
cd "$(dirname "$0")/../.."
mkdir -p /tmp/g && cp .gpu/w1/part1 /tmp/g/ && cp -r .gpu/minilm .gpu/data /tmp/g/ || exit 2
bash .gpu/scripts/setup.sh 2>&1 | tee $OUT/setup.log
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a $OUT/setup.log
ls -la .gpu/w1 | tee -a $OUT/setup.log
t0=$(date +%s)
timeout ${GPU_BENCH_TIMEOUT:-300} python3 -m benchmarks.gpu --out $OUT/gpu.json 2>&1 | tail -60
echo "gpu.py exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
ls $OUT
