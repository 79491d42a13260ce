#!/usr/bin/env bash
# bench/gpu_settle.sh NAME [TARGET_C] [MAX_S]
#
# Waits, with the GPU idle, until its temperature is at most TARGET_C (50) or MAX_S seconds
# (90) have passed, and prints one line: `NAME: 73 C -> 49 C in 31 s` (or `... (gave up)`).
# Without nvidia-smi (a CPU run of the harness) it prints `NAME: no GPU` and returns at once.
#
# Why: a run of 28k reads in a row holds the GPU at its power limit, and a hotter chip leaks
# more of that power, so it clocks lower. bench/side_by_side.sh runs the long reads after the
# short and multi-question runs; decide's saturate the GPU and left it at 73 C in run 19 (an
# H100), where vLLM's, a quarter as busy, left it at 45 C: the two servers' 28k reads started
# from different chips. Settling first gives both the same start. Measured once (a third
# H100, bench/reports/h100-side-by-side-19/settle): the chip fell 8-10 C in its first idle
# second, and the 28k reads in a row took the same time settled or not (233.7 against 233.6
# ms p50), so this costs ~1 s there and guards only against slower-cooling hosts.
set -uo pipefail
name=${1:?NAME} target=${2:-50} max=${3:-90}
command -v nvidia-smi >/dev/null || { echo "$name: no GPU"; exit 0; }
temperature() { nvidia-smi --query-gpu=temperature.gpu --format=csv,noheader,nounits | head -1 | tr -d ' '; }
first=$(temperature) now=$first waited=0
while [[ "$now" =~ ^[0-9]+$ ]] && [ "$now" -gt "$target" ] && [ "$waited" -lt "$max" ]; do
  sleep 1
  waited=$((waited + 1))
  now=$(temperature)
done
verdict=
[[ "$now" =~ ^[0-9]+$ ]] && [ "$now" -gt "$target" ] && verdict=" (gave up)"
echo "$name: $first C -> $now C in $waited s$verdict"
