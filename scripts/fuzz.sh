#!/usr/bin/env bash
# fuzz.sh [SECONDS_PER_TARGET]
#
# Runs every fuzz target of fuzz/ (cargo-fuzz, libFuzzer) for SECONDS_PER_TARGET seconds
# (default 30) and fails when any target finds a crash: a panic, a failed assertion, a hang
# over FUZZ_TIMEOUT seconds on one input (default 10) or memory over 2 GiB.
#
# Each target starts from its seed corpus in fuzz/corpus/<target>/ (real request bodies),
# copied to a temporary directory: what the run discovers is not written into the repository.
# A crashing input is saved as fuzz/artifacts/<target>/crash-* (reproduce it with
# `cargo fuzz run -s none --codegen-units 16 <target> <file>`, the flags of the build here so
# that nothing is rebuilt; add it to the seed corpus with the fix).
#
# Stable Rust: libFuzzer's coverage instrumentation needs no nightly flags, only the address
# sanitizer does, so targets are built without one (`-s none`). Installs cargo-fuzz when it is
# missing and fetches the test model (the tokenizer targets read its tokenizer and chat
# template) unless DECIDE_TEST_MODEL names one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds="${1:-30}"
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]" >&2; exit 2; }
timeout_s="${FUZZ_TIMEOUT:-10}"

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export DECIDE_TEST_MODEL="${DECIDE_TEST_MODEL:-$(scripts/fetch-model.sh smol)}"

# No sanitizer (stable Rust); 16 codegen units let the large instrumented crates (wasmtime,
# cranelift, candle) compile on several cores, where cargo-fuzz's default of 1 runs each on
# one, at some cost in executions per second.
flags=(-s none --codegen-units 16)
targets=($(cargo fuzz list))

echo "== fuzz: building ${#targets[@]} targets"
started=$SECONDS
cargo fuzz build "${flags[@]}"
echo "== fuzz: built in $((SECONDS - started)) s"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
declare -A execs speed status
crashes=0
for target in "${targets[@]}"; do
  echo "== fuzz: $target for $seconds s"
  mkdir -p "$work/corpus/$target"
  if [ -d "fuzz/corpus/$target" ]; then
    cp -R "fuzz/corpus/$target/." "$work/corpus/$target/"
  fi
  # A dictionary of the tokens each kind of input is made of (fuzz/dicts/).
  case "$target" in
    calibration) dict=() ;;
    tokenizer | chat_template) dict=(-dict="$PWD"/fuzz/dicts/text.dict) ;;
    *) dict=(-dict="$PWD"/fuzz/dicts/json.dict) ;;
  esac
  log="$work/$target.log"
  set +e
  cargo fuzz run "${flags[@]}" "$target" "$work/corpus/$target" -- \
    -max_total_time="$seconds" -timeout="$timeout_s" -print_final_stats=1 "${dict[@]}" \
    >"$log" 2>&1
  rc=$?
  set -e
  execs[$target]="$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log" | tail -1)"
  speed[$target]="$(awk '/^stat::average_exec_per_sec:/ { print $2 }' "$log" | tail -1)"
  if [ "$rc" -eq 0 ]; then
    status[$target]=ok
  else
    status[$target]="CRASH (exit $rc)"
    crashes=$((crashes + 1))
    # What libFuzzer said about the crash: the panic and its message, the input saved, and
    # cargo-fuzz's closing lines (how to reproduce it).
    grep -E -A4 "panicked at" "$log" | head -20 || true
    grep -E "SUMMARY|Test unit written" "$log" || true
    tail -n 15 "$log"
  fi
  echo "   ${status[$target]}: ${execs[$target]:-?} executions (${speed[$target]:-?}/s)"
done

echo
echo "== fuzz summary ($seconds s per target)"
printf '%-16s %14s %10s  %s\n' target executions 'exec/s' result
for target in "${targets[@]}"; do
  printf '%-16s %14s %10s  %s\n' "$target" "${execs[$target]:-?}" "${speed[$target]:-?}" "${status[$target]}"
done
if [ "$crashes" -gt 0 ]; then
  echo "fuzz: $crashes of ${#targets[@]} targets crashed (inputs under fuzz/artifacts/)"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, no crash"
