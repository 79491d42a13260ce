#!/usr/bin/env bash
# bench/side_by_side.sh SERVER URL WORKLOADS OUT [QUICK]
#
# Runs issue 17's scenarios with decide-loadgen against one server, from the workload files
# bench/workloads.py wrote into WORKLOADS (`decide-<scenario>.jsonl` or `vllm-<scenario>.jsonl`,
# by SERVER = decide | vllm), and writes one loadgen report per run into OUT
# (`<server>-<run>.json`). Run it for decide, then (decide stopped: they must not share the
# GPU) for vLLM, then bench/side_by_side.py OUT combines both into one report with ratios.
#
#   short prompts:   closed, 1 / 8 / 64 / 256 / 1,024 clients; a rate sweep to saturation
#   multi16/multi64: one client, cold (each unit its own cache key, sent once) and warm
#   long:            the ~28k-token input, first read (cold, sent once) and repeat; long-spaced:
#                    first reads one a second for 16 s (long-first's are back to back, which
#                    holds the GPU at its power limit: a read alone is what one user sees)
#   options255:      one client
#
# Every run also measures decide-loadgen's own ceiling against its trivial server (the
# `ceiling` block of each report). QUICK=1 shortens every run (a CPU check of the harness).
# Environment: LOADGEN (decide-loadgen binary; default target/release/decide-loadgen),
# SECONDS_PER_RUN (10), CEILING_SECONDS (3: seconds of each ceiling run), RATES (the sweep's
# offered units/s), RUNS (only these runs, by name, e.g. "short-c256 short-sweep"),
# CLOCKS_RUNS (long-first long-spaced: the runs during which bench/gpu_clock_sampler.sh samples
# the GPU's clocks into OUT/<server>-gpu-clocks-<run>.csv, every CLOCKS_MS, 1000; "" for none),
# SETTLE_RUNS (long-first: the runs that first wait for the GPU to cool to
# SETTLE_C, 50, for at most SETTLE_MAX_S, 90: bench/gpu_settle.sh; each wait is a line of
# OUT/<server>-settle.txt; "" for none).
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,26p' "$0"; exit 2; }
server=$1 url=$2 workloads=$3 out=$4 quick=${5:-${QUICK:-0}}
loadgen=${LOADGEN:-target/release/decide-loadgen}
seconds=${SECONDS_PER_RUN:-10}
ceiling_seconds=${CEILING_SECONDS:-3}
rates=${RATES:-100,200,400,800,1600,3200,6400,12800}
clients_list="1 8 64 256 1024"
spaced_seconds=16
if [ "$quick" = 1 ]; then
  seconds=2 ceiling_seconds=1 rates=1,2,4 clients_list="1 4" spaced_seconds=2
fi
mkdir -p "$out"
header=()
[ "$server" = decide ] && header=(--server-ms-header x-decide-server-ms)

run() {  # run NAME SCENARIO MODE ARGS...
  local name=$1 scenario=$2 mode=$3; shift 3
  local workload="$workloads/$server-$scenario.jsonl"
  [ -z "${RUNS:-}" ] || [[ " $RUNS " == *" $name "* ]] || return 0
  echo "== $server $name ($mode $*)"
  # Both servers' long reads start from a GPU as cool as the other's (bench/gpu_settle.sh).
  if [[ " ${SETTLE_RUNS-long-first} " == *" $name "* ]]; then
    bash "$(dirname "$0")/gpu_settle.sh" "$name" "${SETTLE_C:-50}" "${SETTLE_MAX_S:-90}" | tee -a "$out/$server-settle.txt"
  fi
  # When each run began and ended (UTC, as nvidia-smi's timestamps in gpu-clocks.csv).
  echo "$(date -u '+%Y/%m/%d %H:%M:%S.%3N') start $name" >>"$out/$server-times.txt"
  local clocks=
  [[ " ${CLOCKS_RUNS-long-first long-spaced} " == *" $name "* ]] && clocks=$out/$server-gpu-clocks-$name.csv
  [ -z "$clocks" ] || bash "$(dirname "$0")/gpu_clock_sampler.sh" start "$clocks" "${CLOCKS_MS:-1000}"
  "$loadgen" "$mode" --url "$url" --workload "$workload" --report "$out/$server-$name.json" \
    --timeout 300 --ceiling-duration "$ceiling_seconds" "${header[@]}" "$@" | tail -n 20
  [ -z "$clocks" ] || bash "$(dirname "$0")/gpu_clock_sampler.sh" stop "$clocks"
  echo "$(date -u '+%Y/%m/%d %H:%M:%S.%3N') end $name" >>"$out/$server-times.txt"
}

for clients in $clients_list; do
  run "short-c$clients" short closed --clients "$clients" --duration "$seconds" --warmup 2
done
run short-sweep short sweep --rates "$rates" --duration "$seconds" --warmup 1
for n in 16 64; do
  run "multi$n-cold" "multi$n-cold" closed --clients 1 --once --warmup 0 --duration "$seconds"
  run "multi$n-warm" "multi$n-warm" closed --clients 1 --duration "$seconds" --warmup 1
done
run long-first long-first closed --clients 1 --once --warmup 0 --duration "$((seconds * 3))"
run long-spaced long-spaced open --rate 1 --warmup 0 --duration "$spaced_seconds"
run long-repeat long-repeat closed --clients 1 --duration "$seconds" --warmup 1
run options255 options255 closed --clients 1 --duration "$seconds" --warmup 1
echo "== $server: reports in $out"
