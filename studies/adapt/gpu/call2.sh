#!/usr/bin/env bash
# call 2: part 1 of the weights, the model files and the data were copied to /tmp/g by call 1 (a later call's tree
# no longer holds what an earlier call carried); part 2 comes with this call. Then the adapt study until the deadline.
cd "$(dirname "$0")/../.."
G=/tmp/g
[ -f $G/part1 ] || { echo "part 1 of the weights is not in $G (call A ran on another machine)"; exit 3; }
cat $G/part1 .gpu/w2/part2 > $G/minilm/model.safetensors
echo "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  $G/minilm/model.safetensors" | sha256sum -c || exit 4
python3 -c "import attnkit, datasets" || { echo "attnkit is not installed any more"; exit 5; }
# the study resumes from the committed records (cells recorded there are skipped); they come back, with the new ones, in $OUT
[ -f $OUT/adapt_records.json ] || cp studies/adapt/records.json $OUT/adapt_records.json
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export ATTNKIT_COMMIT=${ATTNKIT_COMMIT:-unknown} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m studies.adapt.run --data-dir $G/data --model $G/minilm --bf16 --workers ${WORKERS:-14} --seeds ${SEEDS:-1 2 3} \
    --adapt-steps ${ADAPT_STEPS:-2000} --work-dir /tmp/adapt_study --json $OUT/adapt_records.json --log $OUT/study.log \
    --deadline ${DEADLINE:-540} --no-start-after ${NO_START_AFTER:-60} ${EXTRA:-} 2>&1 | grep -v "LOAD REPORT\|^Key\|^---\|MISSING\|^Notes\|^- MISSING\|^$" | tail -60
for f in /tmp/adapt_study/logs/*.log; do echo "== $f"; tail -c 1200 "$f"; done > $OUT/last_logs.txt 2>/dev/null || true
