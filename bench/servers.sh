# Sourced by the GPU benchmark scripts (h200_side_by_side.sh, shapes_side_by_side.sh): waiting
# for a server they started and stopping it, the same way for decide and vLLM, and their vLLM
# phase (vllm_side_by_side).

wait_ready() {  # wait_ready URL PID SECONDS: 0 once URL answers; 1 if the server exits or SECONDS pass
  for _ in $(seq 1 "$3"); do
    python3 -c "import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "server exited during start-up"; return 1; }
    sleep 1
  done
  echo "server not ready after $3 s"
  return 1
}

stop() {  # stop PID: TERM, then KILL the process and whatever it started
  local kids
  kids=$(pgrep -P "$1" 2>/dev/null)
  kill -TERM "$1" 2>/dev/null
  for _ in $(seq 1 40); do kill -0 "$1" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$1" $kids 2>/dev/null
  wait "$1" 2>/dev/null
}

# vllm_side_by_side MODEL_DIR NAME READY_S [VLLM ARGS...]: `vllm serve` from the landed wheels
# (/tmp/peer/site, .peer/land.sh) on 127.0.0.1:8011 with the settings both scripts measure with,
# then bench/side_by_side.sh vllm over the workload files in $W into $OUT/side, then stops it.
# Writes $OUT/vllm-command.txt, vllm.log (its tail) and gpu-memory-vllm.txt. Exits the script
# (3) when vLLM does not answer within READY_S seconds.
vllm_side_by_side() {
  local dir=$1 name=$2 ready_s=$3 P=/tmp/peer
  shift 3
  export PYTHONPATH=$P/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
  # flashinfer is not carried; without this vLLM 0.26 fails at start in its sampler check
  export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
  export VLLM_CACHE_ROOT=$P/cache/vllm TRITON_CACHE_DIR=$P/cache/triton TORCHINDUCTOR_CACHE_DIR=$P/cache/inductor
  export XDG_CACHE_HOME=$P/cache/xdg HF_HOME=$P/cache/hf
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  local url=http://127.0.0.1:8011
  # --max-logprobs 256: the 255-option question asks for its 255 label ids (logprob_token_ids)
  local args=(serve "$dir" --host 127.0.0.1 --port 8011 --served-model-name "$name" --dtype bfloat16
        --enable-prefix-caching --max-logprobs 256 --max-model-len 32768 --gpu-memory-utilization 0.85
        --generation-config vllm --seed 0 --disable-uvicorn-access-log "$@")
  echo "python3 -m vllm.entrypoints.cli.main ${args[*]}" | tee "$OUT/vllm-command.txt"
  ( cd /tmp && exec python3 -m vllm.entrypoints.cli.main "${args[@]}" ) >"$OUT/vllm.log" 2>&1 &
  local server=$!
  wait_ready "$url/v1/models" $server "$ready_s" || { tail -40 "$OUT/vllm.log"; stop $server; exit 3; }
  echo "vLLM ready after $SECONDS s"
  bash "$(dirname "${BASH_SOURCE[0]}")/side_by_side.sh" vllm "$url" "$W" "$OUT/side"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >"$OUT/gpu-memory-vllm.txt" 2>&1
  stop $server
  tail -c 1000000 "$OUT/vllm.log" >"$OUT/vllm.log.tail" && mv "$OUT/vllm.log.tail" "$OUT/vllm.log"
}
