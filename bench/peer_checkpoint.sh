#!/usr/bin/env bash
# bench/peer_checkpoint.sh start|quiet|wait: vLLM's bf16 checkpoint of q15 (/tmp/peer/q15-hf, made
# by .peer/make_hf.py on the host's cores) in the background of another call of the lease.
#
# Why: make_hf.py needs no GPU but took ~85-135 s of a call of its own (runs 12 and 13), device
# time spent with the GPU idle. The device tool keeps a process that started a session of its
# own (setsid) running after its call returns, until the machine goes back; so `start` runs
# make_hf.py that way once the wheels (/tmp/peer/site) and q15 (/tmp/gpu/models) are landed,
# in the same call as kernel_check (mostly GPU work), and the vLLM phase `wait`s for it.
#
#   start  copies make_hf.py and vllm_bench.py out of the repository copy (a later call's
#          copy need not carry them) into /tmp/peer/make-hf/ and starts make_hf.py there:
#          nice 19, MAKE_HF_THREADS torch threads (8), report /tmp/peer/make_hf.json, log
#          /tmp/peer/make_hf.log. Needs .peer/make_hf.py and .peer/vllm_bench.py carried.
#   wait   until /tmp/peer/q15-hf/DONE (at most MAKE_HF_WAIT s, 300); when make_hf.py is not
#          running and left no checkpoint, runs it here in the foreground instead (as the
#          call of its own did). Copies its report and log into $OUT when OUT is set.
#          Exit 0 with the checkpoint there, 2 without.
#   quiet  waits while make_hf.py still runs (at most MAKE_HF_WAIT s), so that no phase that
#          measures decide shares the host's cores with it; runs nothing itself.
set -u
P=/tmp/peer
dir=$P/make-hf
pidfile=$P/make_hf.pid

run_args() {
  echo --report "$P/make_hf.json" --threads "${MAKE_HF_THREADS:-8}"
}

case ${1:-} in
start)
  [ -f "$P/site/.landed" ] || { echo "peer_checkpoint: the wheels are not landed (.peer/land.sh)"; exit 2; }
  [ -f /tmp/gpu/models/q15.gguf ] || { echo "peer_checkpoint: q15 is not landed (.gpu/land.sh)"; exit 2; }
  here=$(cd "$(dirname "$0")/.." && pwd)
  mkdir -p "$dir"
  cp "$here/.peer/make_hf.py" "$here/.peer/vllm_bench.py" "$dir/" || { echo "peer_checkpoint: carry .peer/make_hf.py and .peer/vllm_bench.py"; exit 2; }
  # shellcheck disable=SC2046  # run_args is words on purpose
  PYTHONPATH=$P/site setsid nohup nice -n 19 python3 "$dir/make_hf.py" $(run_args) \
    >"$P/make_hf.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  echo "peer_checkpoint: make_hf.py started (pid $(cat "$pidfile"), log $P/make_hf.log)"
  ;;
quiet)
  start=$SECONDS
  pid=$(cat "$pidfile" 2>/dev/null || true)
  while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ $((SECONDS - start)) -lt "${MAKE_HF_WAIT:-300}" ]; do
    sleep 2
  done
  [ $((SECONDS - start)) -lt 2 ] || echo "peer_checkpoint: waited $((SECONDS - start)) s for make_hf.py to end"
  ;;
wait)
  start=$SECONDS
  pid=$(cat "$pidfile" 2>/dev/null || true)
  while [ ! -f "$P/q15-hf/DONE" ] && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
      && [ $((SECONDS - start)) -lt "${MAKE_HF_WAIT:-300}" ]; do
    sleep 2
  done
  if [ ! -f "$P/q15-hf/DONE" ] && ! { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }; then
    script=$dir/make_hf.py
    [ -f "$script" ] || script=.peer/make_hf.py
    echo "peer_checkpoint: no checkpoint and make_hf.py not running: running $script here"
    # shellcheck disable=SC2046
    PYTHONPATH=$P/site python3 "$script" $(run_args) >>"$P/make_hf.log" 2>&1
  fi
  echo "peer_checkpoint: waited $((SECONDS - start)) s"
  if [ -n "${OUT:-}" ]; then
    cp "$P/make_hf.json" "$OUT/" 2>/dev/null
    tail -c 200000 "$P/make_hf.log" >"$OUT/make_hf.log" 2>/dev/null
  fi
  [ -f "$P/q15-hf/DONE" ] || { echo "peer_checkpoint: no checkpoint (see make_hf.log)"; exit 2; }
  ;;
*)
  echo "usage: bench/peer_checkpoint.sh start|quiet|wait"
  exit 2
  ;;
esac
