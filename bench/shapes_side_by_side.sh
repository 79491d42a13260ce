#!/usr/bin/env bash
# bench/shapes_side_by_side.sh SHAPE make|decide|vllm
#
# Issue 53's GPU table: decide and vLLM side by side on real-size checkpoints of families decide
# could not load before, with random bf16 weights (no registry here ships theirs; speed depends
# on the shapes, not the values). One phase per device call, after the landing calls
# (shared/tools/gpu-pack: /tmp/gpu/bin/decide; /tmp/gpu/bin/decide-loadgen; for vllm,
# `.peer/land.sh`: the wheels in /tmp/peer/site). Carry `.shapes/` (the tokenizer directories,
# written here by models/examples/hf_tokenizer.rs: `.shapes/q15-tokenizer` from q15.gguf,
# `.shapes/smol-tokenizer` from smol.gguf).
#
#   SHAPE:  qwen3-8b (Qwen3-8B: q/k norm, 36 layers, 151,936-row head; Qwen2.5's tokenizer and
#           ChatML template) or llama31-8b (Llama-3.1-8B: Llama 3.1 RoPE scaling, 128,256-row
#           head; SmolLM2's tokenizer and template).
#   make:   bench/random_checkpoint.py writes /tmp/gpu/shapes/SHAPE (~16 GB, once per machine;
#           may run in the background of an earlier call, `OUT=/tmp/gpu/out-bg nohup ... &`:
#           a later phase waits for it).
#   decide: (make first if needed) decide serves it (CUDA, bf16, one read per question, no
#           startup tuning or calibration, the self-check's mass bound off: random weights put
#           no mass on any label); /health (which path runs it: `forward`), the workload
#           files from decide's own prompts (bench/workloads.py, kept in /tmp/gpu/w-SHAPE for
#           the vllm phase), then bench/side_by_side.sh's RUNS.
#   vllm:   `vllm serve` on the same config and tokenizer with `--load-format dummy` (random
#           weights of its own), the same workloads, the same RUNS.
#
# RUNS (bench/side_by_side.sh's run names): "short-c1 short-c64 multi64-cold multi64-warm" by
# default: one question, 64 clients on short prompts, 64 questions over a ~4k-token input (cold
# and warm). Writes $OUT/SHAPE-PHASE.tgz; then, here, bench/side_by_side.py over the two side/
# folders gives the ratios.
set -uo pipefail
shape=${1:?SHAPE: qwen3-8b or llama31-8b}
phase=${2:?PHASE: make, decide or vllm}
case $shape in
qwen3-8b) tokenizer=.shapes/q15-tokenizer ;;
llama31-8b) tokenizer=.shapes/smol-tokenizer ;;
*) echo "shape: qwen3-8b or llama31-8b"; exit 2 ;;
esac
RESULTS=${OUT:-/tmp/gpu/out}
OUT=/tmp/gpu/out-$shape-$phase
rm -rf "$OUT"
mkdir -p "$OUT" "$RESULTS"
trap 'tar -C "$OUT" -czf "$RESULTS/$shape-$phase.tgz" . && echo "packed $RESULTS/$shape-$phase.tgz"' EXIT
. "$(dirname "$0")/servers.sh"
DIR=/tmp/gpu/shapes/$shape
W=/tmp/gpu/w-$shape
export LOADGEN=/tmp/gpu/bin/decide-loadgen SECONDS_PER_RUN=${SECONDS_PER_RUN:-8} CEILING_SECONDS=${CEILING_SECONDS:-2}
export RUNS=${RUNS:-short-c1 short-c64 multi64-cold multi64-warm}
# The vLLM wheels carry numpy should the machine's Python lack it.
[ -d /tmp/peer/site ] && export PYTHONPATH=/tmp/peer/site
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1

make_checkpoint() {  # once per machine; waits for a make still running (started in an earlier call's background)
  for _ in $(seq 1 600); do
    [ -f "$DIR/model.safetensors" ] && return 0
    [ -f "$DIR.pid" ] && kill -0 "$(cat "$DIR.pid")" 2>/dev/null || break
    sleep 1
  done
  mkdir -p "$(dirname "$DIR")"
  echo $$ >"$DIR.pid"
  python3 bench/random_checkpoint.py "$shape" "$DIR" --tokenizer "$tokenizer" | tee "$OUT/checkpoint.json"
  local rc=${PIPESTATUS[0]}
  rm -f "$DIR.pid"
  [ "$rc" = 0 ]
}

case $phase in
make)
  make_checkpoint
  ;;
decide)
  make_checkpoint || { echo "no checkpoint"; exit 3; }
  export CUDA_CACHE_PATH=/tmp/gpu/nvcache
  url=http://127.0.0.1:8125
  /tmp/gpu/bin/decide serve --model "$DIR" --device cuda --weights bf16 --port 8125 \
    --tune-questions none --calibration-questions none --self-check-min-mass 0 \
    --prefix-cache-mib 16384 --max-queued-requests 4096 --cache-dir /tmp/gpu/wasm \
    >/dev/null 2>"$OUT/decide.log" &
  server=$!
  wait_ready "$url/health" $server 400 || { tail -30 "$OUT/decide.log"; stop $server; exit 3; }
  echo "decide ready after $SECONDS s"
  python3 -c "import urllib.request as u; print(u.urlopen('$url/health').read().decode())" >"$OUT/health.json"
  python3 -c "import json, sys; h = json.load(open(sys.argv[1])); print('forward:', h['forward'])" "$OUT/health.json"
  python3 bench/workloads.py --url "$url" --out "$W" --vllm-model "$shape" | tee "$OUT/workloads.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "workloads.py failed"; stop $server; exit 4; }
  cp "$W/workloads.json" "$OUT/"
  bash bench/side_by_side.sh decide "$url" "$W" "$OUT/side"
  python3 -c "import urllib.request as u; print(u.urlopen('$url/metrics').read().decode())" >"$OUT/decide-metrics.txt" 2>&1
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >"$OUT/gpu-memory-decide.txt" 2>&1
  stop $server
  tail -c 1000000 "$OUT/decide.log" >"$OUT/decide.log.tail" && mv "$OUT/decide.log.tail" "$OUT/decide.log"
  ;;
vllm)
  P=/tmp/peer
  [ -f "$P/site/.landed" ] || { echo "vLLM is not landed"; exit 2; }
  [ -f "$W/vllm-short.jsonl" ] || { echo "no workloads: run the decide phase first"; exit 2; }
  [ -f "$DIR/config.json" ] || { echo "no checkpoint directory: run make first"; exit 2; }
  vllm_side_by_side "$DIR" "$shape" 400 --load-format dummy
  ;;
*) echo "phase: make, decide or vllm"; exit 2 ;;
esac
