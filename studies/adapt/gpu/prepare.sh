#!/usr/bin/env bash
# Build .gpu/ (git-ignored through .git/info/exclude) for a lent GPU: the wheels its image lacks, the data the study
# reads, the bundled MiniLM's files, and its 87 MB of weights in two parts (one call carries at most 64 MiB).
# Then, with the device tool (each call's `carry` in brackets; issue B right after A, the machine stays warm 30 s):
#   call 1 [.gpu/wheels .gpu/data .gpu/minilm .gpu/scripts]: bash .gpu/scripts/setup.sh && python3 benchmarks/gpu.py --out $OUT/gpu.json
#   call A [.gpu/w1 .gpu/minilm .gpu/data]: mkdir -p /tmp/g && cp .gpu/w1/part1 /tmp/g/ && cp -r .gpu/minilm .gpu/data /tmp/g/
#   call B [.gpu/w2 .gpu/scripts]: ATTNKIT_COMMIT=$(git rev-parse --short HEAD) DEADLINE=570 bash .gpu/scripts/call2.sh
# (a later call's tree no longer holds what an earlier call carried: keep what must persist outside the repository)
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p .git/info && { grep -q "^/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >> .git/info/exclude; }
DATA=${DATA:-../shared/data}
rm -rf .gpu && mkdir -p .gpu/wheels .gpu/data .gpu/minilm .gpu/w1 .gpu/w2 .gpu/scripts
pip download -q --no-deps -d .gpu/wheels transformers==5.24.0 datasets==5.2.0 dill==0.4.1 captum==0.9.0 tokenizers==0.23.3
pip download -q --no-deps --python-version 3.12 --only-binary=:all: -d .gpu/wheels multiprocess==0.70.19 "regex>=2025.10.22"
cp -r "$DATA"/sst5_ptb "$DATA"/semeval2013_taskB "$DATA"/sentube .gpu/data/
M=$(python3 -c "from attnkit.models.build import bundled_minilm_path as b; print(b())")
cp "$M"/config.json "$M"/tokenizer.json "$M"/tokenizer_config.json "$M"/special_tokens_map.json "$M"/vocab.txt .gpu/minilm/
head -c 35000000 "$M"/model.safetensors > .gpu/w1/part1
tail -c +35000001 "$M"/model.safetensors > .gpu/w2/part2
sha256sum "$M"/model.safetensors | cut -d' ' -f1 > .gpu/minilm.sha256
cp studies/adapt/gpu/setup.sh studies/adapt/gpu/call2.sh .gpu/scripts/
du -sh .gpu/*
