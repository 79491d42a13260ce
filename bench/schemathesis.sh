#!/usr/bin/env bash
# The long contract run: at least 100,000 generated requests over every endpoint of
# /openapi.json against a real server (see scripts/schemathesis.sh for what is checked).
# schemathesis bounds test cases per operation, not requests: 5,000 examples for each of the
# 27 operations it runs, with the coverage phase's cases, is well over 100,000 requests (the
# script prints the request count and the status histogram at the end, so the figure is
# measured, not assumed). SmolLM2 on 2 CPU cores: hours;
# an H200 box: well under one.
#
#   bench/schemathesis.sh [MAX_EXAMPLES]           # default 5000 per operation
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec scripts/schemathesis.sh "${1:-5000}"
