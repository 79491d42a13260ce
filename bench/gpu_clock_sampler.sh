#!/usr/bin/env bash
# bench/gpu_clock_sampler.sh start CSV [PERIOD_MS] | stop CSV
#
# Starts (in the background) or stops nvidia-smi writing the GPU's SM and memory clocks, power,
# temperature, throttle reasons and energy counter (mJ since the driver loaded: exact energy
# between two samples, where power.draw is one moment's) to CSV every PERIOD_MS (1000).
# bench/gpu_clocks.py joins CSV with the runs' start and end times.
#
# Why a script of its own: the sampler is wanted only where clocks explain a figure (run 12
# found 64 28k reads in a row power-capped at ~1.7 GHz) and not beside latency runs: each NVML
# read takes the driver's lock, reported to stall other processes' GPU submissions for
# milliseconds (NVIDIA/open-gpu-kernel-modules#953, #1248). bench/side_by_side.sh samples during
# the runs named in CLOCKS_RUNS; bench/h200_side_by_side.sh for a whole phase with GPU_CLOCKS_MS.
set -uo pipefail
action=${1:?start or stop} csv=${2:?CSV} period=${3:-1000}
command -v nvidia-smi >/dev/null || exit 0
case $action in
  start)
    # The throttle reasons' field was renamed in driver 535; the older name is the fallback.
    reasons=clocks_event_reasons.active
    nvidia-smi --query-gpu=$reasons --format=csv,noheader >/dev/null 2>&1 || reasons=clocks_throttle_reasons.active
    # The energy counter (Volta on) last, so the columns before it stay where they were; left
    # out where nvidia-smi does not know the field (one unknown field fails the whole query).
    energy=,total_energy_consumption
    nvidia-smi --query-gpu=total_energy_consumption --format=csv,noheader >/dev/null 2>&1 || energy=
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons$energy \
      --format=csv -lms "$period" >"$csv" 2>&1 &
    echo $! >"$csv.pid" ;;
  stop)
    [ -f "$csv.pid" ] && kill "$(cat "$csv.pid")" 2>/dev/null
    rm -f "$csv.pid" ;;
  *) echo "start or stop, not $action" >&2; exit 2 ;;
esac
