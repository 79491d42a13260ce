#!/usr/bin/env bash
# bench/kernel_lease.sh: the kernel-only measurements of a lease (no servers), for work on the
# 28k first read between full side-by-side runs. Run on the GPU after `.gpu/land.sh` (the
# model in /tmp/gpu/models) and `.kc/unpack.sh` (the probes in /tmp/gpu/bin); writes into
# $OUT. Steps, by name (`bash bench/kernel_lease.sh long ncu-times`):
#   long       the 28k prefill alone (forward_bench long, RUNS runs, default 9): as served,
#              with each setting in LONG_SETTINGS (name=VAR=VALUE,...; several variables
#              of one setting joined by +: name=VAR=VALUE+VAR2=VALUE2), and as served again;
#   lb         layer_bench: each part of a layer at the 28k read's chunk sizes;
#   ncu-times  Nsight Compute's duration of every kernel of one 28k prefill (after one
#              warm-up prefill; --clock-control none, caches kept), ncu-times.csv: where the
#              model time goes, kernel by kernel;
#   ncu-full   Nsight Compute's full sections for one launch each of the 28k read's main
#              kernels at 8k-row chunks (ncu-<kernel>.csv): what bounds each;
#   ncu-source Nsight Compute on layer_bench's first long attention launch (8192 rows after
#              16384 keys; no model needed): warp stall samples per SASS instruction
#              (ncu-attention-source.csv, SourceCounters) and every section (ncu-attention-lb.csv):
#              where the attention kernel's warps wait, instruction by instruction;
#   short      forward_bench short: a lone short question's read (a 71-row pass after a cached
#              16-token header), 50 timed, forward-short.json (synced_ms against
#              pass_enqueue_ms: the GPU's share; replay_max_abs_diff: CUDA graph replays
#              against the eager read): as served, with each setting in SHORT_SETTINGS (as
#              LONG_SETTINGS; default ws-attention=DECIDE_SHORT_ATTENTION_MAX_KEYS=0, the
#              warp-specialized attention kernel in short passes too, as through run 20, and
#              tuned=DECIDE_BENCH_MATMULS=tuned, the projections on the cuBLASLt algorithms
#              timed at load, the server's `--matmuls tuned`: layer_bench's 96-row layer was
#              11% faster on them, host-timed, and residual-in-gemm=DECIDE_RESIDUAL_IN_GEMM=1,
#              the output and down projections adding to the f32 stream in cuBLAS's epilogue,
#              one bf16 round trip and its norm's read fewer a projection), and as served again;
#   ncu-short  Nsight Compute's duration of every kernel of the same reads (two timed after
#              the warm-ups), ncu-short.csv (bench/ncu_times.py sums one read's kernels):
#              kernels against gaps in a short read, whose ~2.3 ms GPU pass is ~4x what
#              reading the bf16 weights once takes (docs/src/performance/gpu-runbook.md, session 36);
#   ncu-short-attention  Nsight Compute on one attention launch of the short read (a CUDA
#              graph replay's, after ~300 launches): warp stall samples per SASS instruction
#              (ncu-short-attention-source.csv) and every section
#              (ncu-short-attention.csv): where its time for one key tile per head goes
#              (setup, loads, instruction fetch, the multiplies; run 20: ~20.7 us on the
#              warp-specialized kernel, ~10.5 on the plain one served since session 37);
#   kc         kernel_check (kernel-check.txt, .json);
#   pack       everything in $OUT into kernel-lease.tgz (a call brings back a few files only).
# Each step is capped (STEP_TIMEOUT, default 240 s) so one stuck tool costs one step.
set -u
out=${OUT:?OUT: where the files go}
model=/tmp/gpu/models/q15.gguf
bin=/tmp/gpu/bin
export CUDA_CACHE_PATH=/tmp/gpu/nvcache
cap=${STEP_TIMEOUT:-240}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
fb=("$bin/fb" "$model" cuda bf16 long)

short() {  # short NAME [VAR=VALUE ...]
  local name=$1; shift
  timeout "$cap" env "$@" "$bin/fb" "$model" cuda bf16 short >"$out/forward-$name.json" 2>"$out/forward-$name.err"
  echo "forward_bench $name ($*) rc=$?: $(cat "$out/forward-$name.json")"
}

long() {  # long NAME [VAR=VALUE ...]
  local name=$1; shift
  timeout "$cap" env "$@" DECIDE_BENCH_LONG=28259 DECIDE_BENCH_RUNS="${RUNS:-9}" "${fb[@]}" \
    >"$out/forward-$name.json" 2>"$out/forward-$name.err"
  echo "forward_bench $name ($*) rc=$?: $(cat "$out/forward-$name.json")"
}

# RUN (long or short) as served, with each setting of SETTINGS (name=VAR=VALUE,...; several
# variables of one setting joined by +), and as served again: RUN, RUN-name..., RUN-again.
with_settings() {  # with_settings RUN SETTINGS
  local run=$1 s vars settings
  "$run" "$run"
  IFS=, read -ra settings <<<"$2"
  for s in "${settings[@]}"; do
    vars=${s#*=}
    # shellcheck disable=SC2086  # one word per variable
    "$run" "$run-${s%%=*}" ${vars//+/ }
  done
  "$run" "$run-again"
}

# COUNT launches of kernels named like REGEX, after SKIP of them, with every section.
ncu_full() {  # ncu_full NAME REGEX SKIP COUNT
  timeout "$cap" "$ncu" --clock-control none --set full -k "regex:$2" -s "$3" -c "$4" --csv --page details \
    env DECIDE_BENCH_LONG=28259 DECIDE_BENCH_RUNS=1 "${fb[@]}" >"$out/ncu-$1.csv" 2>"$out/ncu-$1.err"
  echo "ncu $1 rc=$?: $(wc -l <"$out/ncu-$1.csv") lines"
}

for step in "$@"; do
  start=$SECONDS
  case $step in
    long)
      with_settings long "${LONG_SETTINGS:-legacy-plan=DECIDE_ATTENTION_PLAN=0}"
      ;;
    lb)
      timeout "$cap" "$bin/lb" --json "$out/layer-bench.json" >"$out/layer-bench.txt" 2>&1
      echo "layer_bench rc=$?"
      ;;
    ncu-times)
      [ -n "$ncu" ] || { echo "no ncu"; continue; }
      timeout "$cap" "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum \
        --csv --page raw env DECIDE_BENCH_LONG=28259 DECIDE_BENCH_RUNS=1 "${fb[@]}" \
        >"$out/ncu-times.csv" 2>"$out/ncu-times.err"
      echo "ncu times rc=$?: $(wc -l <"$out/ncu-times.csv") lines"
      ;;
    ncu-full)
      [ -n "$ncu" ] || { echo "no ncu"; continue; }
      # The warm-up prefill's first chunk (3,712 rows) runs 27 whole layers (a prefill's
      # last layer stops after its keys and values): 27 gate/up and attention launches,
      # ~55 norms and 82 cuBLAS GEMMs (QKV 28, output 27, down 27). Skipping those lands on
      # the second chunk (8,192 rows after 3,712), layer 0: its QKV, output and down GEMMs.
      ncu_full gate-up gate_up_silu 27 1
      ncu_full norm add_rms_norm 56 1
      ncu_full attention attention_bf16_d128_wgmma_ws 27 1
      ncu_full gemm 'gemm|xmma|cutlass' 82 3
      ;;
    ncu-source)
      [ -n "$ncu" ] || { echo "no ncu"; continue; }
      "$ncu" --version | tail -1
      att=(--clock-control none -k regex:attention_bf16_d128_wgmma_ws -s 3 -c 1)
      timeout "$cap" "$ncu" "${att[@]}" --section SourceCounters --section WarpStateStats \
        --page source --print-source sass --csv "$bin/lb" \
        >"$out/ncu-attention-source.csv" 2>"$out/ncu-attention-source.err"
      echo "ncu source rc=$?: $(wc -l <"$out/ncu-attention-source.csv") lines"
      timeout "$cap" "$ncu" "${att[@]}" --set full --page details --csv "$bin/lb" \
        >"$out/ncu-attention-lb.csv" 2>"$out/ncu-attention-lb.err"
      echo "ncu full rc=$?: $(wc -l <"$out/ncu-attention-lb.csv") lines"
      ;;
    short)
      with_settings short "${SHORT_SETTINGS:-ws-attention=DECIDE_SHORT_ATTENTION_MAX_KEYS=0,tuned=DECIDE_BENCH_MATMULS=tuned,residual-in-gemm=DECIDE_RESIDUAL_IN_GEMM=1}"
      ;;
    ncu-short)
      [ -n "$ncu" ] || { echo "no ncu"; continue; }
      timeout "$cap" "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
        env DECIDE_BENCH_RUNS=2 "$bin/fb" "$model" cuda bf16 short >"$out/ncu-short.csv" 2>"$out/ncu-short.err"
      echo "ncu short rc=$?: $(wc -l <"$out/ncu-short.csv") lines"
      ;;
    ncu-short-attention)
      [ -n "$ncu" ] || { echo "no ncu"; continue; }
      # 7 iterations of forward_bench short at DECIDE_BENCH_RUNS=2 launch ~476 attentions
      # (the header's prefill, the eager and lone reads, then 56 an iteration).
      att=(--clock-control none -k regex:attention -s 300 -c 1)
      run_fb=(env DECIDE_BENCH_RUNS=2 "$bin/fb" "$model" cuda bf16 short)
      timeout "$cap" "$ncu" "${att[@]}" --section SourceCounters --section WarpStateStats \
        --page source --print-source sass --csv "${run_fb[@]}" \
        >"$out/ncu-short-attention-source.csv" 2>"$out/ncu-short-attention-source.err"
      echo "ncu short attention source rc=$?: $(wc -l <"$out/ncu-short-attention-source.csv") lines"
      timeout "$cap" "$ncu" "${att[@]}" --set full --page details --csv "${run_fb[@]}" \
        >"$out/ncu-short-attention.csv" 2>"$out/ncu-short-attention.err"
      echo "ncu short attention full rc=$?: $(wc -l <"$out/ncu-short-attention.csv") lines"
      ;;
    kc)
      timeout "$cap" "$bin/kc" --json "$out/kernel-check.json" >"$out/kernel-check.txt" 2>&1
      echo "kernel_check rc=$? ($(grep -c ' ok$' "$out/kernel-check.txt") ok, $(grep -c FAILED "$out/kernel-check.txt") failed)"
      ;;
    pack)
      # Packed outside $OUT first: tar refuses a folder that changes as it reads it.
      tar -C "$out" -czf /tmp/kernel-lease.tgz . && find "$out" -type f -delete && mv /tmp/kernel-lease.tgz "$out/"
      ls -la "$out"
      ;;
    *) echo "unknown step $step" ;;
  esac
  echo "== $step: $((SECONDS - start)) s"
done
