#!/usr/bin/env bash
# The long contract run: over 100,000 generated requests over every endpoint of /openapi.json
# against a real server (see scripts/schemathesis.sh for what is checked). One schemathesis
# process tops out near 100 requests/s and parameterless operations run out of new inputs at
# once, so this runs 5 processes for 420 s each (fuzzing repeats until the budget is spent).
# Measured on a 16-core machine with the model on an H200: 113,359 requests
# (bench/reports/schemathesis-h200/). On 2 CPU cores the model answers far slower and the
# processes share the cores: raise SCHEMATHESIS_MAX_TIME to reach the same count there.
#
#   bench/schemathesis.sh [MAX_EXAMPLES]           # default 20000 per operation
#   DECIDE_SERVE_ARGS="--device cuda" DECIDE_BIN=... bench/schemathesis.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export SCHEMATHESIS_PROCESSES="${SCHEMATHESIS_PROCESSES:-5}" SCHEMATHESIS_WORKERS="${SCHEMATHESIS_WORKERS:-3}"
export SCHEMATHESIS_MAX_TIME="${SCHEMATHESIS_MAX_TIME:-420}"
exec scripts/schemathesis.sh "${1:-20000}"
