#!/usr/bin/env bash
# Build .gpu/ (git-ignored through .git/info/exclude) for a lent GPU: the wheels its image lacks, the data the study
# reads, the bundled MiniLM's files, and its 87 MB of weights in two parts (one call carries at most 64 MiB).
# Then, with the device tool, two calls (each call's `carry` in brackets; issue the second at once after the first,
# the machine stays warm 30 s; together they fit a 15-minute lease with DEADLINE about 545):
#   call 1 [.gpu/wheels .gpu/data .gpu/minilm .gpu/scripts .gpu/w1]: bash .gpu/scripts/call1.sh
#   call 2 [.gpu/w2 .gpu/scripts]: ATTNKIT_COMMIT=$(git rev-parse --short HEAD) DEADLINE=545 EXTRA="--methods ..." bash .gpu/scripts/call2.sh
# then here: cp <files_at>/adapt_records.json studies/adapt/records.json && python -m studies.adapt.render
# (the tree is about 4.4 MB: call 1 carries about 61 MiB of the 64 allowed)
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
cp studies/adapt/gpu/setup.sh studies/adapt/gpu/call1.sh studies/adapt/gpu/call2.sh .gpu/scripts/
du -sh .gpu/*
