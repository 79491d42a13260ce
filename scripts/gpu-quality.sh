#!/usr/bin/env bash
# The GPU half of bench/reports/quality/: `decide tune` on the built-in tuning set with every
# renderer x label scheme (+ the best with permutation), then every setup x calibration policy
# fitted there and scored on the held-out fifth, with label-order flip rates under 4 orders.
#
# Run on the GPU machine after the binary and models have landed (../shared/tools/gpu-pack,
# GPU.md), from the repository root:   bash scripts/gpu-quality.sh q15 q05 smol
# Writes $OUT/<model>.json (figures), <model>.md (held-out table), <model>.txt (stdout),
# <model>.log (stderr) and calibration-<model>/ (the saved tuning result, keyed as `serve`
# looks it up).
set -euo pipefail
out=${OUT:-/tmp/gpu/out}
mkdir -p "$out"
for key in "$@"; do
  start=$(date +%s)
  /tmp/gpu/bin/decide tune --model "/tmp/gpu/models/$key.gguf" --device cuda \
    --questions calibration/tune.jsonl --heldout calibration/heldout.jsonl --permute 4 \
    --calibration-dir "$out/calibration-$key" --cache-dir /tmp/gpu/wasm \
    --report "$out/$key.json" > "$out/$key.txt" 2> "$out/$key.log" || echo "$key failed: see $key.log"
  echo "$key: $(( $(date +%s) - start )) s"
  grep -E "^tune chose|accuracy gain" "$out/$key.txt" || tail -3 "$out/$key.log"
done
