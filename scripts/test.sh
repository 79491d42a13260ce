#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what the tests need (the wasm target, the small
# test model SmolLM2-135M, and Qwen2.5-0.5B for the default model's tokenizer), then the guest plugins' shared-logic tests, the unit tests of every
# crate, the end-to-end tests against the real binary (tests/e2e; traces go to an OTLP receiver
# the test starts), the client SDKs and MCP client, the web console in headless Chromium
# (scripts/browser-test.sh), a short soak under faults (bench/soak.py),
# schemathesis against /openapi.json, three replicas on a shared Postgres behind HAProxy
# (scripts/replicas-test.sh), the deployment manifests and Helm chart against the Kubernetes schemas
# (deploy/validate.sh), the CPU container image built with podman and answering a decision
# (deploy/image-test.sh), the book (scripts/docs.sh: mdbook build, internal links, the generated
# configuration reference against the binary's --help), then every fuzz target for a short while (scripts/fuzz.sh, 30 s each;
# DECIDE_FUZZ_SECONDS to change it). Every step runs even when one before it failed; ends with
# one summary line counting every test that ran, then the steps that failed (exit 1) if any.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Every step runs, whatever the steps before it did: a red step is reported at the end with
# the others instead of hiding them (the setup lines just below are the only ones that stop
# the script, since no step can run without them).
rustup target add wasm32-wasip2 >/dev/null
python3 -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
export DECIDE_TEST_MODEL="${DECIDE_TEST_MODEL:-$(scripts/fetch-model.sh smol)}"
# The tokenizer tests of the default model's pipeline (qwen2: q15 has q05's tokenizer) read
# q05.gguf from .models (DECIDE_MODELS_DIR); without it they skip.
scripts/fetch-model.sh q05 >/dev/null

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
failed=()
# step NAME COMMAND...: runs one step, keeps its output for the summary, records a failure.
step() {
    local name="$1"
    shift
    echo "== $name"
    local started=$SECONDS
    if "$@" 2>&1 | tee -a "$log"; then
        echo "-- $name: ok ($((SECONDS - started)) s)"
    else
        echo "-- $name: FAILED ($((SECONDS - started)) s)"
        failed+=("$name")
    fi
}

step "guest plugins: shared logic (native)" \
    cargo test --manifest-path guests/Cargo.toml -p decide-guest-common --release
step "host, models and end-to-end tests" \
    cargo test --release --workspace --no-fail-fast
step "client SDKs (openai, typesafe-sdk, the MCP client over stdio and /mcp) against the release binary" \
    python3 -m pytest -q tests/python
step "web console: /console in Debian's headless Chromium with Selenium (scripts/browser-test.sh; screenshots in target/console-screenshots/)" \
    scripts/browser-test.sh
step "soak: clients over every endpoint under plugin swaps, misbehaving plugins, hang-ups and bad bodies (30 s)" \
    python3 bench/soak.py --clients 4 --seconds 30
step "the API contract: schemathesis against /openapi.json (20 examples per operation)" \
    scripts/schemathesis.sh 20
step "replicas: three SmolLM2 replicas on one Postgres store behind HAProxy (scripts/replicas-test.sh)" \
    scripts/replicas-test.sh
step "deployment: Kubernetes manifests and the Helm chart against the schemas (deploy/validate.sh)" \
    deploy/validate.sh
step "the CPU image: deploy/Dockerfile built with podman, run, answering a decision (deploy/image-test.sh)" \
    deploy/image-test.sh
step "docs: the book builds with no broken internal link and the configuration reference is current (scripts/docs.sh)" \
    scripts/docs.sh
step "fuzz targets: every parser a client reaches (scripts/fuzz.sh)" \
    scripts/fuzz.sh "${DECIDE_FUZZ_SECONDS:-30}"

awk '/^test result:/ || / in [0-9.]+s/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "decide: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
if ((${#failed[@]})); then
    echo "decide: ${#failed[@]} step(s) failed:"
    printf '  - %s\n' "${failed[@]}"
    exit 1
fi
echo "decide: every step passed"
