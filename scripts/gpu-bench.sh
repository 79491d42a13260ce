#!/usr/bin/env bash
# The GPU run of issue #3, on the lent H200 (no Rust, no network there): run after
# `bash .gpu/land.sh` has placed the CUDA binaries in /tmp/gpu/bin and the model in
# /tmp/gpu/models. Writes everything under $OUT (it comes back):
#   forward.jsonl   forward_bench per weight format (choose the format by measurement)
#   server.log      the server's log, with the startup calibration lines (#6)
#   bench.json      bench/bench.py's report against the server on the chosen format
#   gpu-memory.txt  device memory the server holds at the end
#
# Usage: scripts/gpu-bench.sh MODEL_NAME [FORMATS] [SERVER_FORMAT]
#   MODEL_NAME     file stem under /tmp/gpu/models (q15)
#   FORMATS        weight formats to compare with forward_bench (default "quantized bf16";
#                  "" runs none)
#   SERVER_FORMAT  weights for the server (default: the format with the lowest single read)
set -u
name=${1:?model name}
formats=${2-quantized bf16}
out=${OUT:-/tmp/gpu/out}
mkdir -p "$out"
bin=/tmp/gpu/bin
model=/tmp/gpu/models/$name.gguf
export CUDA_CACHE_PATH=/tmp/gpu/nvcache
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1

for w in $formats; do
  timeout 150 "$bin/forward_bench" "$model" cuda "$w" tf32 >>"$out/forward.jsonl" 2>>"$out/forward.err" ||
    echo "{\"weights\": \"$w\", \"failed\": $?}" >>"$out/forward.jsonl"
done
cat "$out/forward.jsonl"

server_format=${3:-$(python3 - "$out/forward.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "single_ms" in r]
if not rows:
    print("quantized")
    sys.exit()
best = min(rows, key=lambda r: r["single_ms"]["p50"] + r["per_decision_ms"] * 8)
print({"Quantized": "quantized", "BF16": "bf16", "F16": "f16", "F32": "f32"}[best["weights"]])
EOF
)}
echo "server weights: $server_format" | tee "$out/server-format.txt"

"$bin/decide" serve --model "$model" --device cuda --weights "$server_format" --port 8125 \
  --prefix-cache-mib 16384 --calibration-dir /tmp/gpu/calibration --cache-dir /tmp/gpu/wasm \
  >"$out/server.out" 2>"$out/server.log" &
server=$!
for _ in $(seq 1 600); do
  python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8125/health')" 2>/dev/null && break
  grep -q "startup failed" "$out/server.log" && break
  kill -0 $server 2>/dev/null || break
  sleep 0.5
done
fetch() { python3 -c "import sys, urllib.request as u
try: print(u.urlopen('http://127.0.0.1:8125' + sys.argv[1]).read().decode())
except Exception as e: print(e, getattr(e, 'read', lambda: b'')().decode())" "$1"; }
fetch /health >"$out/health.json"
timeout ${BENCH_TIMEOUT:-300} python3 bench/bench.py --url http://127.0.0.1:8125 --report "$out/bench.json" ${BENCH_ARGS:-}
fetch /metrics >"$out/metrics.txt"
# Device memory the server holds after the benchmark (weights, prefix cache, CUDA graphs).
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >"$out/gpu-memory.txt" 2>&1
kill $server
wait $server 2>/dev/null
grep -E "calibration|ready|weight" "$out/server.log" | tail -20
