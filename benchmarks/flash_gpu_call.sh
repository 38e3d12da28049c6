#!/usr/bin/env bash
# One call on a lent GPU (device tool) for the flash Triton kernels, each step bounded, everything it writes in $OUT:
#   1. tests/attention/test_flash_triton.py compiled on the GPU (TRITON_INTERPRET=0: the conftest's default is the
#      interpreter), 2. benchmarks/flash.py's GPU table (D 64, L 512/2048/8192, as the H100 table of 2026-11-27),
#   3. benchmarks/flash_configs.py (launch settings; powers at run time vs compiled), 4. with time left,
#   benchmarks/gpu.py's model rows (a training step and inference, L 128 and 512).
# The image holds torch, triton, transformers and pytest; attnkit goes in with --no-deps. DEADLINE: seconds in all.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRITON_INTERPRET=0
start=$(date +%s); DEADLINE=${DEADLINE:-540}
left() { echo $(( DEADLINE - ($(date +%s) - start) )); }
python3 -c "import sys, torch, triton, transformers; print(sys.version.split()[0], torch.__version__, triton.__version__, transformers.__version__, torch.cuda.get_device_name(0))"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i "warning\|notice" | tail -2
echo "== 1. tests (left $(left) s)"
timeout 130 python3 -m pytest -q -x -p no:cacheprovider tests/attention/test_flash_triton.py > $OUT/tests.log 2>&1
echo "tests exit $?"; tail -5 $OUT/tests.log
echo "== 2. flash.py (left $(left) s)"
timeout 110 python3 -m benchmarks.flash --gpu --head-dims 64 --lengths 512 2048 8192 --rounds 5 --out $OUT/flash_gpu.md 2>&1 | tail -25
echo "== 3. flash_configs.py (left $(left) s)"
timeout $(( $(left) - 100 )) python3 -m benchmarks.flash_configs --lengths 2048 8192 --rounds 5 --out $OUT/flash_configs.md 2>&1 | grep -v '^|' | tail -8
echo "== 4. gpu.py models (left $(left) s)"
[ $(left) -gt 60 ] && timeout $(( $(left) - 15 )) python3 -m benchmarks.gpu --lengths 2048 --model-lengths 128 512 --rounds 12 --out $OUT/gpu_models.json 2>&1 | tail -30
echo "done after $(( $(date +%s) - start )) s"; ls $OUT
