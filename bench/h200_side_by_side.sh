#!/usr/bin/env bash
# bench/h200_side_by_side.sh probes|decide|vllm|ab
#
# Issue 17's side-by-side run on the lent H200, one phase per device call (each must fit in the
# 10-minute limit of a call; the two servers must not share the GPU). Run from the repository
# copy after the landing calls: `.gpu/land.sh` (gpu-pack: /tmp/gpu/bin/decide, the q15 GGUF in
# /tmp/gpu/models), the load generator unpacked to /tmp/gpu/bin/decide-loadgen, and for vLLM
# `.peer/land.sh` (the copy of ../shared/tools/vllm-peer: wheels in /tmp/peer/site) and
# `.peer/make_hf.py` (the bf16 checkpoint /tmp/peer/q15-hf, since session 32 started in the
# background of an earlier call: bench/peer_checkpoint.sh). Writes $OUT/PHASE.tgz of:
#
#   probes: only the kernel and model probes below (a call of their own, as the decide phase
#           with them may pass a call's 10 minutes); PROBES=0 leaves them out of `decide`;
#           KC_FROM=DIR takes kernel_check's verdict from DIR (an earlier call's, same binaries).
#           Ends with bench/pick_settings.py: the GPU settings that won (settings.txt; kept on
#           the machine for SETTINGS=auto below).
#   decide: first, when they were landed, the kernel and model probes: /tmp/gpu/bin/kc
#           (models/examples/kernel_check: kernel-check.txt/json), /tmp/gpu/bin/hs
#           (server/examples/host_steps: the 28k read's prepare, host-steps.txt) and /tmp/gpu/bin/fb
#           (models/examples/forward_bench: with FB_COMPARE=1 forward.json with `compare`;
#           `long`, the 28k prefill alone, forward-long.json, then forward-long-*.json
#           with settings turned off (probes() below says which), and from
#           /tmp/gpu/bin/fb_old if landed, forward-long-baseline.json);
#           then starts decide on q15 (CUDA, bf16 weights, one read per question:
#           `--tune-questions none`), writes the workload files from decide's own prompts
#           (bench/workloads.py, kept in /tmp/gpu/w for the vLLM phase; exit 4 when decide
#           refuses them), checks a few seconds of short reads (smoke(): exit 4 unless all
#           got a 200, also for each baseline or ab variant), runs
#           bench/side_by_side.sh against it, records the Server-Timing header of three cold
#           28k reads, runs bench/saturation.py at 8, 64, 256 and 1,024 clients, stops it.
#           decide.log, workloads.json, side/, long-server-timing.txt, saturation-c*.json. With
#           BASELINE_FLAGS and/or BASELINE_BIN, then the same saturation runs on decide
#           started with those flags added, or from that binary, and its short-c1 and
#           short-c64 runs: decide-baseline.log, saturation-baseline-c*.json, side-baseline/.
#           BASELINE_FLAGS may hold several sets of flags separated by ';': each is run in
#           turn, named baseline-1, baseline-2, ... (baseline-flags.txt says which is which).
#   ab:     only an A/B of decide's settings: AB_FLAGS holds sets of flags separated by ';'
#           (a set may start with VAR=VALUE words: decide's environment, e.g. the GPU
#           settings DECIDE_ATTENTION_LONGEST_FIRST=1); per set, decide started with them, the
#           saturation runs and short-c1/short-c64/long-first (saturation-ab-N-c*.json,
#           side-ab-N/, ab-flags.txt). AB_RUNS picks other runs of bench/side_by_side.sh, and
#           SATURATION_CLIENTS= (empty) leaves the saturation runs out: e.g. the 28k read alone
#           per setting, AB_RUNS=long-first SATURATION_CLIENTS= .
#   vllm:   waits for the bf16 checkpoint (bench/peer_checkpoint.sh wait: make_hf.json and
#           make_hf.log), starts `vllm serve` on it (the same weights dequantized to bf16,
#           prefix caching on), runs bench/side_by_side.sh with the same workloads, stops it.
#           vllm.log, side/.
#
# Every phase also writes host-cpu.txt (/proc/stat every 500 ms), side/<server>-gpu-clocks-long-*.csv
# (SM clock, power, throttle reasons during long-first and long-spaced; the whole phase into
# gpu-clocks.csv with GPU_CLOCKS_MS), and bench/side_by_side.sh writes side/<server>-times.txt
# (when each run began and ended): bench/gpu_clocks.py joins clocks and times; bench/stalls.py
# sets the slow moments of a run (the loadgen report's timeline) beside host-cpu.txt.
#
# Then, here: bench/side_by_side.py DIR on the two side/ folders copied into one DIR.
#
# Build and pack every binary (decide, decide-loadgen, kc, fb, hs: bench/h200_pack.sh) before the first call, and land
# the pieces while this machine is otherwise idle: the GPU machine is given back 30 s after a
# call ends, and with it everything landed (issue 17's notes: ~230 s lost that way once, and
# uploads slow to 60-80 s a piece while the test suite runs here).
# Environment: SECONDS_PER_RUN (8), CEILING_SECONDS (2), passed on to side_by_side.sh;
# GPU_CLOCKS_MS (0: the clock sampler only during long-first; N: every N ms the whole phase);
# PROBE_TIMEOUT (240 s per probe); LONG_VARIANTS (every forward-long variant; e.g.
# "long long-unaligned long-again"); SATURATION_CLIENTS ("8 64 256 1024"); SETTINGS=auto (the
# decide and ab phases run decide with the settings the last probes on this machine picked:
# no time to choose by hand, as the machine goes 30 s after a call; AB_FLAGS add to them);
# BASELINE_FLAGS (none) and BASELINE_BIN (none) for the decide phase; DECIDE_* variables
# reach decide's settings (e.g. DECIDE_BATCH_REJOIN_US=0), RUNS selects scenarios
# (bench/side_by_side.sh).
set -uo pipefail
phase=${1:?probes, decide, ab or vllm}
# The device call brings back only a few files: everything goes into /tmp/gpu/out-PHASE, packed
# into $OUT/PHASE.tgz at the end (and kept there for a later call, should this one be cut short).
RESULTS=${OUT:-/tmp/gpu/out}
OUT=/tmp/gpu/out-$phase
rm -rf "$OUT"
trap '[ -n "$clocks" ] && bash bench/gpu_clock_sampler.sh stop "$clocks"; kill ${host_cpu:-} 2>/dev/null; tar -C "$OUT" -czf "$RESULTS/$phase.tgz" . && echo "packed $RESULTS/$phase.tgz"' EXIT
W=/tmp/gpu/w
PICKED=/tmp/gpu/settings.env
LOADGEN=/tmp/gpu/bin/decide-loadgen
export LOADGEN SECONDS_PER_RUN=${SECONDS_PER_RUN:-8} CEILING_SECONDS=${CEILING_SECONDS:-2}
mkdir -p "$OUT/side" "$W"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1
# The GPU's clocks, power and throttle reasons: bench/side_by_side.sh samples them during
# long-first (its CLOCKS_RUNS), where run 12 found 64 28k reads in a row power-capped at ~1.7
# GHz; GPU_CLOCKS_MS (0: off) samples the whole phase into gpu-clocks.csv. Off by default since
# run 13: each NVML read takes the driver's lock, which may stall the servers' launches (run
# 12's tails; call 27b of docs/src/performance/gpu-runbook.md is the A/B).
clocks=
if [ "${GPU_CLOCKS_MS:-0}" != 0 ]; then
  bash bench/gpu_clock_sampler.sh start "$OUT/gpu-clocks.csv" "$GPU_CLOCKS_MS"
  clocks=$OUT/gpu-clocks.csv
fi
# The host's CPU time by kind every 500 ms (host-cpu.txt: unix time, then /proc/stat's cpu line:
# user nice system idle iowait irq softirq steal ...): steal time on a virtual machine, or the
# cores all busy, would stall the servers' threads; bench/stalls.py sets it beside the slow moments.
( while sleep 0.5; do echo "$(date +%s.%N) $(head -n 1 /proc/stat)"; done ) >"$OUT/host-cpu.txt" 2>/dev/null &
host_cpu=$!

# wait_ready URL PID SECONDS, stop PID
. "$(dirname "$0")/servers.sh"

url=http://127.0.0.1:8125
start_decide() {  # start_decide LOG BINARY [VAR=VALUE...] [FLAGS...]: decide on q15 as measured, FLAGS added, VARs in its environment
  local log=$1 bin=$2; shift 2
  local vars=()
  while [[ ${1:-} =~ ^[A-Z_][A-Z0-9_]*= ]]; do vars+=("$1"); shift; done
  env "${vars[@]}" "$bin" serve --model /tmp/gpu/models/q15.gguf --device cuda --weights bf16 \
    --port 8125 --tune-questions none --prefix-cache-mib 16384 --max-queued-requests 4096 \
    --calibration-dir /tmp/gpu/calibration --cache-dir /tmp/gpu/wasm "$@" >/dev/null 2>"$log" &
  server=$!
  wait_ready "$url/health" $server 300 || { tail -30 "$log"; stop $server; exit 3; }
}

# A few seconds of closed-loop short reads before the long runs: short passes replay CUDA
# graphs from the second sighting of their shape on, so a server whose replays fail (run 10's
# first lease: every read failed after the first few, and the phase ran on for 300 s) stops
# the phase here. smoke NAME: $OUT/smoke-NAME.json, exit 4 unless every request got a 200
# (SMOKE_SECONDS: its length, 2).
smoke() {
  rm -f "$OUT/smoke-$1.json"
  "$LOADGEN" closed --url "$url" --workload "$W/decide-short.jsonl" --clients 4 --duration "${SMOKE_SECONDS:-2}" \
    --no-ceiling --report "$OUT/smoke-$1.json" >/dev/null 2>&1
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if d["requests"] > 0 and d["statuses"] == {"200": d["requests"]} else 1)' \
    "$OUT/smoke-$1.json" 2>/dev/null && return 0
  echo "smoke: decide ($1) failed short reads (statuses: $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["statuses"])' "$OUT/smoke-$1.json" 2>/dev/null || echo 'no report')); stopping the phase"
  stop $server
  exit 4
}

# Where short-prompt throughput goes at saturation (worker busy time, pass efficiency).
saturation() {  # saturation NAME: bench/saturation.py at each of SATURATION_CLIENTS
  for clients in ${SATURATION_CLIENTS-8 64 256 1024}; do
    python3 bench/saturation.py --url "$url" --workload "$W/decide-short.jsonl" --clients $clients \
      --seconds "$SECONDS_PER_RUN" --loadgen "$LOADGEN" --report "$OUT/$1-c$clients.json"
  done
}

# The answers to the first requests of three workloads (answers-NAME.json): compared between
# variants here with `bench/answers.py compare`, they show what a setting did to the results.
answers() {  # answers NAME
  python3 bench/answers.py record --url "$url" --out "$OUT/answers-$1.json" --per-file 16 \
    "$W/decide-short.jsonl" "$W/decide-multi64-cold.jsonl" "$W/decide-options255.jsonl"
}

# variants NAME BINARY 'FLAGS;FLAGS;...': per set of flags, decide from BINARY with them added,
# the saturation runs, the short-c1/short-c64 runs (latency percentiles for the p99 goal) and
# long-first (the 28k read), then its answers:
# NAME (one set) or NAME-1, NAME-2, ...; NAME-flags.txt says which is which.
variants() {
  local flag_sets i name
  IFS=';' read -ra flag_sets <<<"$3"
  : >"$OUT/$1-flags.txt"
  for i in "${!flag_sets[@]}"; do
    name=$1
    [ ${#flag_sets[@]} -gt 1 ] && name=$1-$((i + 1))
    echo "$name: $2 ${flag_sets[$i]}" | tee -a "$OUT/$1-flags.txt"
    # shellcheck disable=SC2086 # the flags are split on purpose
    start_decide "$OUT/decide-$name.log" "$2" ${flag_sets[$i]}
    smoke "$name"
    saturation "saturation-$name"
    RUNS="${AB_RUNS:-short-c1 short-c64 long-first}" bash bench/side_by_side.sh decide "$url" "$W" "$OUT/side-$name"
    answers "$name"
    # The prefix cache's and the passes' counters over the whole variant.
    python3 -c "import urllib.request as u; print(u.urlopen('$url/metrics').read().decode())" >"$OUT/metrics-$name.txt" 2>&1
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv >"$OUT/gpu-memory-$name.txt" 2>&1
    stop $server
  done
}

# The kernel and model probes (kernel_check, forward_bench), before any server: they must not
# share the GPU with it.
probes() {
  # Each probe under a time limit (PROBE_TIMEOUT, 240 s): a kernel that hangs costs its own
  # step, not the call (session 26 lost a whole probes call and its landed files when the
  # machine stopped answering ~7 minutes in, the cause unknown).
  local t=(timeout "${PROBE_TIMEOUT:-240}")
  if [ -n "${KC_FROM:-}" ]; then
    # KC_FROM=DIR: kernel_check's verdict from an earlier call of the same session, on the
    # same kind of GPU and the same .kc binaries (DIR holds its kernel-check.txt and .json),
    # when the lease's device time does not cover running it again (~170 s by session 31).
    cp "$KC_FROM/kernel-check.txt" "$KC_FROM/kernel-check.json" "$OUT/"
    echo "kernel_check: the verdict of $KC_FROM ($(grep -c ' ok$' "$OUT/kernel-check.txt") checks ok, $(grep -c FAILED "$OUT/kernel-check.txt") failed)" | tee "$OUT/kernel-check-source.txt"
  elif [ -x /tmp/gpu/bin/kc ]; then
    "${t[@]}" /tmp/gpu/bin/kc --json "$OUT/kernel-check.json" >"$OUT/kernel-check.txt" 2>&1
    echo "kernel_check rc=$? ($(grep -c ' ok$' "$OUT/kernel-check.txt") checks ok)"
  fi
  if [ -x /tmp/gpu/bin/hs ]; then
    # The 28k read's prepare on this machine's cores (server/examples/host_steps): its template
    # and tokens under a new tenant salt each time (the token cache cold, as in a first
    # read), the same through tokenizers' pipeline (DECIDE_TOKENIZE_DIRECT=0, as before
    # models/src/byte_level.rs), and the same text tokenized in one call on one thread.
    for what in template-long-cold direct-off tokenize-long; do
      echo "== $what"
      case $what in
        direct-off) DECIDE_TOKENIZE_DIRECT=0 "${t[@]}" /tmp/gpu/bin/hs /tmp/gpu/models/q15.gguf --long-words 18400 --loop template-long-cold ;;
        *) "${t[@]}" /tmp/gpu/bin/hs /tmp/gpu/models/q15.gguf --long-words 18400 --loop $what ;;
      esac
    done >"$OUT/host-steps.txt" 2>&1
    echo "host_steps: $(grep 'per iteration' "$OUT/host-steps.txt" | tr '\n' ' ')"
  fi
  if [ -x /tmp/gpu/bin/fb ]; then
    # The 28k prefill alone: as served (the remainder chunk first, the cuts on the
    # attention's key tiles, the cache in pieces); with the remainder chunk last, as before
    # (DECIDE_PREFILL_REMAINDER_FIRST=0); with the cuts where the plain lengths fall
    # (DECIDE_PREFILL_ALIGN=0, as before); with every attention launch laid out by the
    # rule before run 14, head by head (DECIDE_ATTENTION_PLAN=0); with each
    # chunk's keys copied onto the cache, as before (DECIDE_KV_PIECES=0); with attention
    # blocks longest first across heads in every launch (DECIDE_ATTENTION_LONGEST_FIRST=1;
    # unset, long passes take the order the attention plan finds shorter); with the output
    # and down projections added to the stream in their GEMM (DECIDE_RESIDUAL_IN_GEMM=1);
    # with the CUDA memory pool keeping its free memory mapped (DECIDE_CUDA_POOL_KEEP=1);
    # with the gate/up kernel's output stored by TMA (DECIDE_GATE_UP_TMA_STORE=1); with its
    # epilogue after each tile's multiplies, as before (DECIDE_GATE_UP_OVERLAP=0); with its
    # tiles in bands of 4,096 or 2,048 rows (DECIDE_GATE_UP_BAND_ROWS);
    # with longest-first, residual-in-GEMM and pool-keep together; as served again (the spread); and from an earlier commit's
    # forward_bench when landed at /tmp/gpu/bin/fb_old: the A/Bs on the model alone. (Run 11
    # measured the gate/up kernel's A/B, DECIDE_FUSED_GATE_UP=0, and 16k-row chunks,
    # DECIDE_BENCH_CHUNK=16384.)
    # (FB_COMPARE=1: first `compare`, the fused kernels against candle's ops, forward.json.)
    fb=(/tmp/gpu/bin/fb /tmp/gpu/models/q15.gguf cuda bf16)
    if [ "${FB_COMPARE:-0}" = 1 ]; then
      "${t[@]}" "${fb[@]}" compare >"$OUT/forward.json" 2>"$OUT/forward.err"
      echo "forward_bench compare rc=$?: $(cat "$OUT/forward.json")"
    fi
    long() {  # long NAME [VAR=VALUE ...]: forward-NAME.json (LONG_VARIANTS: only these names)
      local name=$1; shift
      [ -z "${LONG_VARIANTS:-}" ] || [[ " $LONG_VARIANTS " == *" $name "* ]] || return 0
      "${t[@]}" env "$@" DECIDE_BENCH_LONG=28259 DECIDE_BENCH_RUNS=9 "${fb[@]}" long >"$OUT/forward-$name.json" 2>"$OUT/forward-$name.err"
      echo "forward_bench $name ($*) rc=$?: $(cat "$OUT/forward-$name.json")"
    }
    long long
    long long-remainder-last DECIDE_PREFILL_REMAINDER_FIRST=0
    long long-unaligned DECIDE_PREFILL_ALIGN=0
    long long-legacy-plan DECIDE_ATTENTION_PLAN=0
    long long-no-pieces DECIDE_KV_PIECES=0
    long long-longest-first DECIDE_ATTENTION_LONGEST_FIRST=1
    long long-residual-in-gemm DECIDE_RESIDUAL_IN_GEMM=1
    long long-pool-keep DECIDE_CUDA_POOL_KEEP=1
    long long-gate-up-tma-store DECIDE_GATE_UP_TMA_STORE=1
    long long-no-overlap DECIDE_GATE_UP_OVERLAP=0
    long long-no-bands DECIDE_GATE_UP_BAND_ROWS=0
    long long-gate-up-bands-2048 DECIDE_GATE_UP_BAND_ROWS=2048
    long long-all DECIDE_ATTENTION_LONGEST_FIRST=1 DECIDE_RESIDUAL_IN_GEMM=1 DECIDE_CUDA_POOL_KEEP=1
    long long-again
    if [ -x /tmp/gpu/bin/fb_old ]; then
      DECIDE_BENCH_LONG=28259 "${t[@]}" /tmp/gpu/bin/fb_old /tmp/gpu/models/q15.gguf cuda bf16 long >"$OUT/forward-long-baseline.json" 2>"$OUT/forward-long-baseline.err"
      echo "forward_bench long, baseline binary rc=$?: $(cat "$OUT/forward-long-baseline.json")"
    fi
  fi
  # The settings a later phase runs with under SETTINGS=auto (bench/pick_settings.py says
  # how it picks): settings.env, or none when kernel_check failed what no setting turns off.
  rm -f "$PICKED"
  python3 bench/pick_settings.py "$OUT" --env "$PICKED" --json "$OUT/settings.json" | tee "$OUT/settings.txt"
}

# SETTINGS=auto: the decide or ab phase runs decide with the settings that this machine's
# last probes picked ($PICKED, kept on the machine between calls), and records them.
use_picked_settings() {
  [ "${SETTINGS:-}" = auto ] || return 0
  [ -f "$PICKED" ] || { echo "SETTINGS=auto: no $PICKED (run the probes phase first; see its settings.txt)"; exit 2; }
  cp "$PICKED" "$OUT/settings.env"
  echo "SETTINGS=auto: $(tr '\n' ' ' <"$PICKED")"
  set -a
  # shellcheck disable=SC1090 # written by bench/pick_settings.py
  . "$PICKED"
  set +a
}

# A vLLM checkpoint still being made in the background (bench/peer_checkpoint.sh start)
# would share the host's cores with what the phase measures: it ends first.
[ "$phase" = vllm ] || bash bench/peer_checkpoint.sh quiet

case $phase in
probes)
  # Only the probes: a call of their own keeps the decide phase within a call's 10 minutes.
  export CUDA_CACHE_PATH=/tmp/gpu/nvcache
  probes
  ;;
ab)
  # Only the A/B: decide with each of AB_FLAGS (';'-separated sets), after writing the
  # workload files from the first one's prompts.
  export CUDA_CACHE_PATH=/tmp/gpu/nvcache
  use_picked_settings
  start_decide "$OUT/decide-workloads.log" /tmp/gpu/bin/decide
  python3 bench/workloads.py --url "$url" --out "$W" >"$OUT/workloads.txt" || {
    echo "workloads.py failed: decide refused its questions; stopping the phase"; stop $server; exit 4; }
  stop $server
  variants ab /tmp/gpu/bin/decide "${AB_FLAGS:?AB_FLAGS: flag sets separated by ;}"
  ;;
decide)
  export CUDA_CACHE_PATH=/tmp/gpu/nvcache
  [ "${PROBES:-1}" = 1 ] && probes
  use_picked_settings
  start_decide "$OUT/decide.log" /tmp/gpu/bin/decide
  echo "decide ready after $SECONDS s"
  python3 bench/workloads.py --url "$url" --out "$W" | tee "$OUT/workloads.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "workloads.py failed: decide refused its questions; stopping the phase"; stop $server; exit 4; }
  smoke decide
  cp "$W"/*.json "$OUT/" 2>/dev/null
  # The workload files too, so a vLLM phase in a later lease can run on them (unpack decide.tgz's
  # w/ into /tmp/gpu/w there): a lease ends 30 s after a call, and with it /tmp/gpu/w.
  mkdir -p "$OUT/w" && cp "$W"/*.jsonl "$OUT/w/"
  bash bench/side_by_side.sh decide "$url" "$W" "$OUT/side"
  # Where the server's time over the model's goes on the 28k first read: the Server-Timing
  # header (compile, prepare, model, answer) of three more cold reads, each with a new key.
  python3 - "$url" "$W/decide-long-first.jsonl" >"$OUT/long-server-timing.txt" 2>&1 <<'PY'
import json, sys, time, urllib.request
url, path = sys.argv[1], sys.argv[2]
body = json.loads(open(path).readline())["body"]
for i in range(3):
    body["prompt_cache_key"] = f"server-timing-{i}"
    req = urllib.request.Request(url + "/v1/decisions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        r.read()
        wall = (time.perf_counter() - t) * 1e3
        print(f"wall {wall:.1f} ms; x-decide-server-ms {r.headers.get('x-decide-server-ms')}; "
              f"server-timing {r.headers.get('server-timing')}")
PY
  saturation saturation
  answers decide
  python3 -c "import urllib.request as u; print(u.urlopen('$url/metrics').read().decode())" >"$OUT/decide-metrics.txt" 2>&1
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >"$OUT/gpu-memory.txt" 2>&1
  stop $server
  # The same saturation runs on a server with BASELINE_FLAGS (say, an earlier default) added,
  # and/or another binary, BASELINE_BIN (say, an earlier commit's): an A/B in the same lease.
  if [ -n "${BASELINE_FLAGS:-}${BASELINE_BIN:-}" ]; then
    variants baseline "${BASELINE_BIN:-/tmp/gpu/bin/decide}" "${BASELINE_FLAGS:- }"
  fi
  tail -c 2000000 "$OUT/decide.log" >"$OUT/decide.log.tail" && mv "$OUT/decide.log.tail" "$OUT/decide.log"
  ;;
vllm)
  P=/tmp/peer
  [ -f "$P/site/.landed" ] || { echo "vLLM is not landed"; exit 2; }
  # The checkpoint: made by an earlier call, or by make_hf.py still running in the background
  # (bench/peer_checkpoint.sh start), or here.
  bash bench/peer_checkpoint.sh wait || { echo "vLLM's checkpoint is not there"; exit 2; }
  vllm_side_by_side "$P/q15-hf" q15 300
  ;;
*) echo "phase: decide or vllm"; exit 2 ;;
esac
echo "phase $phase done in $SECONDS s; $(ls "$OUT/side" | wc -l) reports in $OUT/side"
