#!/usr/bin/env bash
# Fair share between tenants on the lent GPU (#13), after `bash .gpu/land.sh` has placed the
# CUDA binary in /tmp/gpu/bin and the model in /tmp/gpu/models; run from the repository copy.
# Two tenants are created with `decide tenants` in a fresh data dir; for each value of
# --fair-share-pass-tokens in PASS_TOKENS a server is started and bench/fairness.py measures
# B's p95 alone and under A's 64-client flood, and A's throughput alone and shared.
# Writes under $OUT: fairness-pass<N>.json, server-pass<N>.log.
#
# Usage: scripts/gpu-fairness.sh MODEL_NAME   (PASS_TOKENS="64 512" by default)
set -u
name=${1:?model name}
out=${OUT:-/tmp/gpu/out}
mkdir -p "$out"
bin=/tmp/gpu/bin/decide
model=/tmp/gpu/models/$name.gguf
data=$(mktemp -d /tmp/gpu/data.XXXX)
export CUDA_CACHE_PATH=/tmp/gpu/nvcache
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
a=$("$bin" tenants --data-dir "$data" create --name flood | field id)
b=$("$bin" tenants --data-dir "$data" create --name steady | field id)
key_a=$("$bin" tenants --data-dir "$data" keys create "$a" | field key)
key_b=$("$bin" tenants --data-dir "$data" keys create "$b" | field key)
for pass in ${PASS_TOKENS:-64 512}; do
  "$bin" serve --model "$model" --device cuda --port 8126 --data-dir "$data" \
    --calibration-questions none --cache-dir /tmp/gpu/wasm --fair-share-pass-tokens "$pass" \
    >/dev/null 2>"$out/server-pass$pass.log" &
  server=$!
  for _ in $(seq 1 300); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8126/health')" 2>/dev/null && break
    kill -0 $server 2>/dev/null || break
    sleep 0.5
  done
  timeout ${BENCH_TIMEOUT:-200} python3 bench/fairness.py --url http://127.0.0.1:8126 \
    --key-a "$key_a" --key-b "$key_b" --samples ${SAMPLES:-60} --report "$out/fairness-pass$pass.json"
  kill $server
  wait $server 2>/dev/null
done
