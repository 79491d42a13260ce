#!/usr/bin/env bash
# Several replicas on one shared store, on this machine: installs Postgres 15 and HAProxy from
# Debian's packages if missing, starts a throwaway Postgres cluster on a free loopback port
# (in a temp dir, as the `postgres` user when run as root: initdb refuses root), runs the
# store contract tests against it (SQLite and Postgres), then three SmolLM2 replicas behind
# HAProxy (tests/replicas/test_replicas.py: plugin propagation, cache affinity vs round robin,
# the shared rate limit, a replica killed under load). Everything is stopped and removed at
# the end. Needs the release binary (cargo build --release -p decide) and DECIDE_TEST_MODEL.
#
#     scripts/replicas-test.sh [REPORT.json]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

report="${1:-}"
pg_bin=/usr/lib/postgresql/15/bin
if [[ ! -x "$pg_bin/initdb" ]] || ! command -v haproxy >/dev/null; then
    echo "installing postgresql and haproxy (Debian packages)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql haproxy >/dev/null
fi

work="$(mktemp -d /tmp/decide-replicas.XXXXXX)"
as_db_user=()
if [[ "$(id -u)" == 0 ]]; then
    chown postgres "$work"
    as_db_user=(runuser -u postgres --)
fi
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
stop() {
    "${as_db_user[@]}" "$pg_bin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap stop EXIT
"${as_db_user[@]}" "$pg_bin/initdb" -D "$work/data" -A trust -U decide >/dev/null
"${as_db_user[@]}" "$pg_bin/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w \
    -o "-p $port -k $work -c listen_addresses=127.0.0.1" start >/dev/null
psql -q "postgres://decide@127.0.0.1:$port/postgres" -c "CREATE DATABASE replicas"
echo "postgres $("$pg_bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port; $(haproxy -v | head -1)"

echo "== the store contract: SQLite and Postgres"
DECIDE_TEST_POSTGRES_URL="postgres://decide@127.0.0.1:$port/postgres" \
    cargo test --release -p decide-tenancy --lib store_contract

echo "== three replicas behind HAProxy"
cargo build --release -p decide
python3 tests/replicas/test_replicas.py --store "postgres://decide@127.0.0.1:$port/replicas" \
    ${report:+--report "$report"}
