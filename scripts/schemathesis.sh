#!/usr/bin/env bash
# Property-based tests of the HTTP contract: schemathesis generates requests for every
# operation of GET /openapi.json (valid and invalid ones), sends them to a real server and
# checks each response: no 5xx but the documented 503, a documented status, a documented
# content type, a body that matches its schema. Then it prints the request count and the
# status histogram (from schemathesis's own HAR report).
#
#   scripts/schemathesis.sh [MAX_EXAMPLES]        # per operation; default 20 (the CI pass)
#   SCHEMATHESIS_MAX_TIME=3600 scripts/schemathesis.sh 5000   # the long run (bench/schemathesis.sh)
#
# The server is the release binary (`$DECIDE_BIN`, else target/release/decide) with the test
# model (`$DECIDE_TEST_MODEL`), started here with one key that is both its --api-key and its
# --admin-key, so schemathesis reaches every endpoint, the admin API and its mutations included
# (a tenant it creates does not lock it out: the operator's key still serves). Plugin uploads
# and calibration need a tenant's key and answer 403 here; tests/e2e/contract.rs covers them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

examples="${1:-20}"
binary="${DECIDE_BIN:-${CARGO_TARGET_DIR:-target}/release/decide}"
model="${DECIDE_TEST_MODEL:-.models/smol.gguf}"
key="schemathesis-$$"
work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"' EXIT

"$binary" serve --model "$model" --port 0 --data-dir "$work/data" \
  --calibration-questions none --tune-questions none \
  --api-key "$key" --admin-key "$key" >"$work/listening" 2>"$work/server.log" &
server=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/listening" 2>/dev/null && break
  sleep 0.1
done
base="$(sed -n 's/^decide listening on //p' "$work/listening")"
[ -n "$base" ] || { cat "$work/server.log"; exit 1; }

extra=()
[ -n "${SCHEMATHESIS_MAX_TIME:-}" ] && extra+=(--max-time "$SCHEMATHESIS_MAX_TIME")
status=0
schemathesis run "$base/openapi.json" \
  --header "Authorization: Bearer $key" \
  --wait-for-schema 120 \
  --max-examples "$examples" \
  --phases examples,coverage,fuzzing \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --request-timeout 120 \
  --workers "${SCHEMATHESIS_WORKERS:-2}" \
  --seed "${SCHEMATHESIS_SEED:-16}" \
  --report har --report-dir "$work/report" "${extra[@]}" || status=$?

python3 - "$work/report" <<'PY'
import collections, json, pathlib, sys
statuses = collections.Counter()
operations = set()
for har in pathlib.Path(sys.argv[1]).glob("*.har"):
    for entry in json.loads(har.read_text())["log"]["entries"]:
        statuses[entry["response"]["status"]] += 1
        request = entry["request"]
        operations.add((request["method"], request["url"].split("?")[0]))
total = sum(statuses.values())
print(f"schemathesis: {total} requests; status histogram: "
      + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items())))
PY
if grep -qE "panicked|thread .* panicked" "$work/server.log"; then
  echo "the server panicked:"; grep -B2 -A10 panicked "$work/server.log"; status=1
fi
kill -0 "$server" 2>/dev/null || { echo "the server is no longer running"; status=1; }
exit "$status"
