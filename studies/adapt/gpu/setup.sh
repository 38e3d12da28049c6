#!/usr/bin/env bash
# on the lent GPU: the wheels the image lacks (or has older), attnkit itself (no deps: the image has torch/triton)
set -e
cd "$(dirname "$0")/../.."
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name(0))"
python3 -m pip install -q --no-deps --no-index .gpu/wheels/*.whl 2>&1 | grep -v -i "warning\|notice" | tail -5 || true
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i "warning\|notice" | tail -5 || true
python3 -c "import attnkit, transformers, datasets, captum, pyarrow, regex; print('imports ok', transformers.__version__, datasets.__version__, pyarrow.__version__)"
