#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what the tests need (the wasm target, the small
# test model SmolLM2-135M), then the Rust unit tests of every crate, the guest plugins' own
# tests, and the end-to-end tests against the real binary (tests/e2e).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

rustup target add wasm32-wasip2 >/dev/null
export DECIDE_TEST_MODEL="${DECIDE_TEST_MODEL:-$(scripts/fetch-model.sh smol)}"

echo "== guest plugins (native unit tests)"
cargo test --manifest-path guests/Cargo.toml --workspace --release
echo "== host, models and end-to-end tests"
cargo test --release --workspace
